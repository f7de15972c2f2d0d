package io.sparkglass.sampling;

import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;

/**
 * A coarse {@code System.nanoTime()} (5 ms resolution) kept in a volatile field by one daemon
 * thread, so that the gate reads a field (about 1 ns) instead of calling the clock (about
 * 20 ns). It starts each second of the rendering budget, so 5 ms steps are precise enough. It
 * ticks only while a round is active (200 wake-ups/s), else every 200 ms.
 */
final class CoarseClock {
  private CoarseClock() {}

  private static final long TICK_NANOS = 5_000_000L;
  private static volatile long nanos = System.nanoTime();
  private static final AtomicInteger ACTIVE = new AtomicInteger();
  private static volatile Thread ticker;

  static long now() {
    return nanos;
  }

  /** A round started: tick every 5 ms until {@link #release()}. */
  static void acquire() {
    nanos = System.nanoTime();
    ACTIVE.incrementAndGet();
    Thread t = ticker;
    if (t == null) {
      synchronized (CoarseClock.class) {
        if (ticker == null) {
          t = new Thread(CoarseClock::run, "sparkglass-sampling-clock");
          t.setDaemon(true);
          ticker = t;
          t.start();
        }
        t = ticker;
      }
    }
    LockSupport.unpark(t);
  }

  static void release() {
    ACTIVE.decrementAndGet();
  }

  private static void run() {
    while (true) {
      nanos = System.nanoTime();
      LockSupport.parkNanos(ACTIVE.get() > 0 ? TICK_NANOS : 200_000_000L);
    }
  }
}
