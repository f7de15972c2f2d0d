package io.sparkglass.sampling;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.spark.TaskContext;

/**
 * One round on one executor: per-partition samplers, the window deadline, and the result.
 *
 * <p>Task threads call {@link #admit()} and {@link #capture(String)}; the executor plugin's
 * poller thread calls {@link #close()} at the deadline (round-scoped auto-disable) and then
 * {@link #drain()}.
 */
final class ActiveRound {
  final String roundId;
  final VertexTap tap;
  final long deadlineNanos;
  final int maxRate;
  /**
   * Records one partition keeps in this round at most: {@code maxRate × (window + 1 s)}, the
   * rate limit over the round's sampling window, spread over the partition's rows (see
   * {@link PartitionSampler}).
   */
  final int allowance;
  final int maxRecordLength;
  final long budgetNanos;
  /**
   * Nanoseconds of filter evaluation one partition may spend in this round: what the
   * per-second budget allows over the round's capture time. Past it the filter is stopped in
   * that partition for the rest of the round (and the round says so), so no filter the
   * allowlist admits can hold the application's tasks longer.
   */
  final long filterBudgetNanos;
  /** The round's compiled {@link RowProgram}, or null (render every column, no filter). */
  final byte[] program;
  volatile boolean closed;
  boolean reported;
  private volatile PartitionSampler[] samplers = new PartitionSampler[0];

  ActiveRound(String roundId, VertexTap tap, long deadlineNanos, int maxRate,
      int maxRecordLength, int budgetMs) {
    this(roundId, tap, deadlineNanos, maxRate, maxRecordLength, budgetMs, null,
        Math.max(0L, (deadlineNanos - System.nanoTime()) / 1_000_000L));
  }

  /**
   * @param windowMs the round's sampling window (its capture may last longer: a round on a
   *     streaming vertex waits for a micro-batch), which sets {@link #allowance}
   */
  ActiveRound(String roundId, VertexTap tap, long deadlineNanos, int maxRate,
      int maxRecordLength, int budgetMs, byte[] program, long windowMs) {
    this.program = program;
    this.roundId = roundId;
    this.tap = tap;
    this.deadlineNanos = deadlineNanos;
    this.maxRate = maxRate;
    this.allowance = allowance(maxRate, windowMs);
    this.maxRecordLength = maxRecordLength;
    this.budgetNanos = budgetMs * 1_000_000L;
    long remaining = deadlineNanos - System.nanoTime();
    long seconds = Math.max(1L, (remaining + 999_999_999L) / 1_000_000_000L);
    this.filterBudgetNanos = budgetNanos * seconds;
  }

  /** {@code maxRate × (window + 1 s)}, at least 1, at most {@code Integer.MAX_VALUE}. */
  static int allowance(int maxRate, long windowMs) {
    long records = Math.max(1L, maxRate) * (Math.max(0L, windowMs) + 1000L) / 1000L;
    return (int) Math.min(Integer.MAX_VALUE, Math.max(1L, records));
  }

  private PartitionSampler sampler(TaskContext tc) {
    return samplerFor(tc.partitionId());
  }

  /** The sampler of partition {@code p} in this round (made on first use). */
  PartitionSampler samplerFor(int p) {
    PartitionSampler[] arr = samplers;
    if (p < arr.length) {
      PartitionSampler s = arr[p];
      if (s != null) {
        return s;
      }
    }
    return create(p);
  }

  private synchronized PartitionSampler create(int p) {
    PartitionSampler[] arr = samplers;
    if (p < arr.length && arr[p] != null) {
      return arr[p];
    }
    PartitionSampler[] grown = java.util.Arrays.copyOf(arr, Math.max(arr.length, p + 1));
    PartitionSampler s = new PartitionSampler(p, this);
    grown[p] = s;
    samplers = grown;
    return s;
  }

  /** Gate: true when this row may be rendered and captured (rate, budget, buffer allow). */
  boolean admit() {
    TaskContext tc = TaskContext.get();
    if (tc == null || closed) {
      return false;
    }
    return sampler(tc).admit(CoarseClock.now());
  }

  /** Capture: filters, renders and keeps one row of the current task's partition. */
  void capture(org.apache.spark.sql.Row row) {
    TaskContext tc = TaskContext.get();
    if (tc != null) {
      sampler(tc).capture(row);
    }
  }

  /** Partition indexes that saw rows in this round so far. */
  List<Integer> partitionsSeen() {
    List<Integer> out = new ArrayList<>();
    for (PartitionSampler s : samplers) {
      if (s != null) {
        out.add(s.partition);
      }
    }
    return out;
  }

  /** Stops capturing: the gate goes back to a single volatile read. */
  void close() {
    if (!closed) {
      closed = true;
      tap.end(this);
      CoarseClock.release();
    }
  }

  /**
   * The report payload: one map per partition that saw rows (see {@link Messages}). At most
   * {@link #MAX_REPORT_CHARS} characters of record data go into one report, so that it stays
   * well under Spark's RPC message limit; records beyond it count as dropped by contention.
   */
  List<Object> drain() {
    List<Object> out = new ArrayList<>();
    long[] budget = {MAX_REPORT_CHARS};
    long settleBy = System.nanoTime() + SETTLE_NANOS;
    for (PartitionSampler s : samplers) {
      if (s != null) {
        s.settle(settleBy);
      }
    }
    for (PartitionSampler s : samplers) {
      if (s != null) {
        out.add(s.drain(budget));
      }
    }
    return out;
  }

  /** The round whose gate admitted the current thread's row, until its capture takes it. */
  static final ThreadLocal<ActiveRound> ADMITTED = new ThreadLocal<>();

  /** How long a report waits for rows admitted before the round closed (2 s). */
  static final long SETTLE_NANOS = 2_000_000_000L;

  /** Characters of record data per executor report (about 16 MB on the wire at most). */
  static final long MAX_REPORT_CHARS = 8_000_000L;
}
