package io.sparkglass.sampling;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Executor half of the plugin: one daemon thread polls the driver every
 * {@code spark.sparkglass.sampling.poll-interval-ms} (default 100) for rounds, starts them on
 * the local taps, closes each at its own window end without waiting for the driver, and
 * sends the buffers back (retrying at every poll until the driver has them).
 */
public final class SamplingExecutorPlugin implements ExecutorPlugin {
  private static final Logger LOG = LoggerFactory.getLogger(SamplingExecutorPlugin.class);

  private PluginContext ctx;
  private long pollMs;
  private volatile boolean running;
  private Thread poller;
  /** Rounds known on this executor; touched only by the poller thread. */
  private final Map<String, ActiveRound> rounds = new HashMap<>();

  @Override
  public void init(PluginContext ctx, Map<String, String> extraConf) {
    this.ctx = ctx;
    this.pollMs = Math.max(10L, ctx.conf().getLong("spark.sparkglass.sampling.poll-interval-ms",
        100L));
    running = true;
    poller = new Thread(this::run, "sparkglass-sampling-poller");
    poller.setDaemon(true);
    poller.start();
  }

  @Override
  public void shutdown() {
    running = false;
    Thread t = poller;
    if (t != null) {
      t.interrupt();
    }
    try {
      for (ActiveRound r : new ArrayList<>(rounds.values())) {
        r.close(); // the poller may be mid-cycle: a missed round closes at its deadline anyway
      }
    } catch (RuntimeException e) {
      LOG.debug("sparkglass sampling shutdown", e);
    }
  }

  private void run() {
    while (running) {
      try {
        cycle();
      } catch (Throwable e) {
        // The driver may be busy or gone; try again next cycle.
        LOG.debug("sparkglass sampling poll failed", e);
      }
      long sleep = pollMs;
      long now = System.nanoTime();
      for (ActiveRound r : rounds.values()) {
        if (!r.closed) {
          sleep = Math.min(sleep, Math.max(1L, TimeUnit.NANOSECONDS.toMillis(r.deadlineNanos - now)));
        }
      }
      try {
        Thread.sleep(sleep);
      } catch (InterruptedException e) {
        return;
      }
    }
  }

  private void cycle() throws Exception {
    closeExpired();
    sendReports();
    Map<String, Object> poll = new HashMap<>();
    poll.put(Messages.TYPE, Messages.POLL);
    poll.put(Messages.EXECUTOR_ID, ctx.executorID());
    poll.put(Messages.PID, ProcessHandle.current().pid());
    HashMap<String, Object> progress = new HashMap<>();
    for (ActiveRound r : rounds.values()) {
      progress.put(r.roundId, new ArrayList<>(r.partitionsSeen()));
    }
    poll.put(Messages.PROGRESS, progress);
    Object reply = ctx.ask(poll);
    Set<String> listed = new HashSet<>();
    if (reply instanceof Map) {
      Object specs = ((Map<?, ?>) reply).get(Messages.ROUNDS);
      if (specs instanceof List) {
        for (Object o : (List<?>) specs) {
          listed.add(apply((Map<?, ?>) o));
        }
      }
    }
    // A round the driver no longer lists is reported or forgotten: drop it.
    for (Iterator<ActiveRound> it = rounds.values().iterator(); it.hasNext(); ) {
      ActiveRound r = it.next();
      if (!listed.contains(r.roundId)) {
        r.close();
        it.remove();
      }
    }
    closeExpired();
    sendReports();
  }

  private String apply(Map<?, ?> spec) {
    String roundId = String.valueOf(spec.get(Messages.ROUND_ID));
    boolean cancelled = Boolean.TRUE.equals(spec.get(Messages.CANCELLED));
    ActiveRound r = rounds.get(roundId);
    if (r == null) {
      long remainingMs = ((Number) spec.get(Messages.REMAINING_MS)).longValue();
      Object window = spec.get(Messages.WINDOW_MS);
      VertexTap tap = VertexTap.forKey(String.valueOf(spec.get(Messages.TAP_KEY)));
      r = new ActiveRound(roundId, tap,
          System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(remainingMs),
          ((Number) spec.get(Messages.MAX_RATE)).intValue(),
          ((Number) spec.get(Messages.MAX_RECORD_LENGTH)).intValue(),
          ((Number) spec.get(Messages.BUDGET_MS)).intValue(),
          RowProgram.bytesOf((String) spec.get(Messages.PROGRAM)),
          window instanceof Number ? ((Number) window).longValue() : remainingMs);
      // The JVM's one-time costs of the first renders are paid here, before the taps open,
      // not by the first rows the tasks hand over (a cold first render used up its
      // partition's rendering budget for the rest of the second).
      RowProgram.warmUp(r.program);
      rounds.put(roundId, r);
      CoarseClock.acquire();
      tap.begin(r);
      if (remainingMs <= 0) {
        r.close();
      }
    }
    if (cancelled) {
      r.close();
    }
    return roundId;
  }

  private void closeExpired() {
    long now = System.nanoTime();
    for (ActiveRound r : rounds.values()) {
      if (!r.closed && now - r.deadlineNanos >= 0) {
        r.close();
      }
    }
  }

  private void sendReports() {
    for (ActiveRound r : rounds.values()) {
      if (r.closed && !r.reported) {
        Map<String, Object> report = new HashMap<>();
        report.put(Messages.TYPE, Messages.REPORT);
        report.put(Messages.EXECUTOR_ID, ctx.executorID());
        report.put(Messages.PID, ProcessHandle.current().pid());
        report.put(Messages.ROUND_ID, r.roundId);
        report.put(Messages.PARTITIONS, r.drain());
        try {
          ctx.ask(report);
          r.reported = true;
        } catch (Exception e) {
          LOG.debug("sparkglass sampling report failed; retrying", e);
        }
      }
    }
  }
}
