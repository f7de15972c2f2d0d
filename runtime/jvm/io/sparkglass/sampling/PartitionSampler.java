package io.sparkglass.sampling;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The state of one subtask (Spark partition) in one round: token bucket, rendering budget,
 * bounded buffer and drop counters.
 *
 * <p>Rate limit: a token bucket refilled at {@code maxRate} tokens/s holding (and starting
 * with) one second's worth, because Spark processes a partition in bursts (one task per
 * micro-batch) and a smaller bucket would see only the first rows of each burst. A window of
 * W seconds therefore admits at most {@code maxRate*(W+1)} rows per subtask. Budget: the time between admission and capture
 * (to_json rendering) summed per second may not exceed {@code tostring-budget-ms}. Buffer: at
 * most {@link #MAX_RECORDS} rows (fill-and-stop). Rows refused by the bucket count as
 * {@code droppedByRateLimit}; rows the bucket allowed but the budget or a full buffer refused
 * count as {@code droppedByContention}.
 *
 * <p>Threads: the partition's task thread writes the bucket and counters (counters with release
 * stores so the poller's drain sees them); the buffer is guarded by {@code this}.
 */
final class PartitionSampler {
  static final int MAX_RECORDS = 1000;
  private static final long SECOND = 1_000_000_000L;
  private static final VarHandle DROPPED_RATE;
  private static final VarHandle DROPPED_CONTENTION;

  static {
    try {
      MethodHandles.Lookup l = MethodHandles.lookup();
      DROPPED_RATE = l.findVarHandle(PartitionSampler.class, "droppedRate", long.class);
      DROPPED_CONTENTION = l.findVarHandle(PartitionSampler.class, "droppedContention", long.class);
    } catch (ReflectiveOperationException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  final int partition;
  private final ActiveRound round;
  private final double capacity;
  private final double tokensPerNano;
  private double tokens;
  private long lastRefill;
  private long budgetPeriodStart;
  private long budgetUsed;
  private long admittedAt;
  private int reserved;
  private long droppedRate;
  private long droppedContention;
  private final List<Object[]> records = new ArrayList<>();
  private boolean drained;

  PartitionSampler(int partition, ActiveRound round) {
    this.partition = partition;
    this.round = round;
    this.capacity = Math.max(1.0, round.maxRate);
    this.tokensPerNano = round.maxRate / (double) SECOND;
    this.tokens = capacity;
    this.lastRefill = CoarseClock.now();
    this.budgetPeriodStart = lastRefill;
  }

  private void dropRate() {
    DROPPED_RATE.setRelease(this, droppedRate + 1);
  }

  private void dropContention() {
    DROPPED_CONTENTION.setRelease(this, droppedContention + 1);
  }

  boolean admit(long now) {
    if (tokens < 1.0) {
      long elapsed = now - lastRefill;
      if (elapsed > 0) {
        tokens = Math.min(capacity, tokens + elapsed * tokensPerNano);
        lastRefill = now;
      }
      if (tokens < 1.0) {
        dropRate();
        return false;
      }
    }
    tokens -= 1.0;
    if (reserved >= MAX_RECORDS) {
      dropContention();
      return false;
    }
    if (now - budgetPeriodStart >= SECOND) {
      budgetPeriodStart = now;
      budgetUsed = 0;
    }
    if (budgetUsed >= round.budgetNanos) {
      dropContention();
      return false;
    }
    reserved++;
    admittedAt = System.nanoTime();
    return true;
  }

  void capture(String json) {
    if (admittedAt != 0) {
      budgetUsed += System.nanoTime() - admittedAt;
      admittedAt = 0;
    }
    String data = json == null ? "null" : json;
    boolean truncated = false;
    int max = round.maxRecordLength;
    if (data.length() > max) {
      int cut = max;
      // Never split a surrogate pair: the text must stay valid UTF-16.
      if (cut > 0 && Character.isHighSurrogate(data.charAt(cut - 1))) {
        cut--;
      }
      data = data.substring(0, cut);
      truncated = true;
    }
    Object[] record = {System.currentTimeMillis(), data, truncated};
    synchronized (this) {
      if (drained) {
        dropContention();
        return;
      }
      records.add(record);
    }
  }

  /** Empties the buffer into a report entry; {@code budget[0]} is the characters left. */
  synchronized Map<String, Object> drain(long[] budget) {
    drained = true;
    List<Object> out = new ArrayList<>(records.size());
    for (Object[] r : records) {
      int chars = ((String) r[1]).length();
      if (chars > budget[0]) {
        dropContention();
        continue;
      }
      budget[0] -= chars;
      HashMap<String, Object> m = new HashMap<>();
      m.put(Messages.TIMESTAMP, r[0]);
      m.put(Messages.DATA, r[1]);
      m.put(Messages.TRUNCATED, r[2]);
      out.add(m);
    }
    records.clear();
    HashMap<String, Object> m = new HashMap<>();
    m.put(Messages.PARTITION, partition);
    m.put(Messages.RECORDS, out);
    m.put(Messages.DROPPED_RATE, (long) DROPPED_RATE.getAcquire(this));
    m.put(Messages.DROPPED_CONTENTION, (long) DROPPED_CONTENTION.getAcquire(this));
    return m;
  }
}
