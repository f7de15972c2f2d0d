package io.sparkglass.sampling;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The state of one subtask (Spark partition) in one round: the spread rate limit, rendering
 * budget, bounded buffer and drop counters.
 *
 * <p>Rate limit: a round keeps at most {@link ActiveRound#allowance} records per subtask
 * ({@code max-sample-rate × (window + 1 s)}), spread over every row the subtask passes during
 * the round rather than taken from the first ones. Spark runs a partition in bursts (one task
 * per micro-batch, often a few tens of milliseconds for thousands of rows), so any limit that
 * counts time would spend itself on the first moment of a burst: the first rows of a file, the
 * first keys of a shuffle partition. Instead the sampler takes every {@code stride}-th row,
 * starting with every row; when the buffer holds the allowance it drops every other record it
 * holds and doubles the stride. The records kept are then evenly spread over all the rows seen
 * so far (between half the allowance and all of it once there were more rows than that), however
 * the rows were spread in time, and no row costs more than a counter and a comparison. Rows the
 * stride passes over and records thinned out count as {@code droppedByRateLimit}. Rendering
 * costs at most about {@code allowance × (1 + log2(rows / allowance) / 2)} renders per round, and
 * is bounded per second by the budget below.
 *
 * <p>Budget: the time between admission and capture (to_json rendering) summed per second may
 * not exceed {@code tostring-budget-ms}. Buffer: at most {@link #MAX_RECORDS} rows (fill-and-stop;
 * it binds only when the allowance is larger). Rows the rate limit picked but the budget or a
 * full buffer refused count as {@code droppedByContention}. Filter: the time a round's filter
 * takes in this partition adds up; past the round's filter budget the filter is stopped here for
 * the rest of the round (the gate admits nothing more) and the report says so
 * ({@code filterStopped}). With a filter the gate admits every row the budget and buffer allow;
 * the stride then counts only the rows that match, so the rate limit spreads over matching rows.
 *
 * <p>Threads: the partition's task thread writes the stride state and counters (counters with
 * release stores so the poller's drain sees them); the buffer is guarded by {@code this}. When
 * two tasks share a partition index (two queries reading one vertex) the stride is shared and
 * only approximate, while the program, which is not thread-safe, is evaluated under its lock.
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
  /** Rows (with a filter: matching rows) the rate limit has looked at (task thread). */
  private long seen;
  /** The {@link #seen} count of the next row the rate limit takes (task thread). */
  private long nextPick = 1;
  /** Rows between two picks: doubles each time the buffer is thinned. */
  private long stride = 1;
  private long budgetPeriodStart;
  private long budgetUsed;
  private long admittedAt;
  private int reserved;
  /**
   * Rows admitted by the gate whose capture has not ended: a report waits for them (see
   * {@link #settle}), so a row admitted just before the round closed is kept, not lost to
   * a drain that overtook a slow first render (cold JVM, class loading).
   */
  private final java.util.concurrent.atomic.AtomicInteger inFlight =
      new java.util.concurrent.atomic.AtomicInteger();
  private long droppedRate;
  private long droppedContention;
  private final List<Object[]> records = new ArrayList<>();
  private boolean drained;
  /** This partition's copy of the round's program (expressions are not thread-safe). */
  private final RowProgram program;
  /** With a filter the stride counts matching rows: the gate admits every row. */
  private final boolean filtered;
  /** Time the filter took in this round (task thread only). */
  private long filterNanos;
  /** Set once {@link #filterNanos} passed the round's filter budget: nothing more runs. */
  private volatile boolean filterStopped;

  PartitionSampler(int partition, ActiveRound round) {
    this.partition = partition;
    this.round = round;
    this.program = round.program == null ? null : RowProgram.decode(round.program);
    this.filtered = program != null && program.filtered();
    this.budgetPeriodStart = CoarseClock.now();
  }

  private void dropRate() {
    DROPPED_RATE.setRelease(this, droppedRate + 1);
  }

  private void dropContention() {
    DROPPED_CONTENTION.setRelease(this, droppedContention + 1);
  }

  /**
   * The rate limit: true for the rows the stride picks (the {@code nextPick}-th row looked at,
   * then every {@code stride}-th); the others count as dropped by the rate limit.
   */
  private boolean pick() {
    long n = ++seen;
    if (n < nextPick) {
      dropRate();
      return false;
    }
    nextPick = n + stride;
    return true;
  }

  boolean admit(long now) {
    if (filterStopped) {
      return false;
    }
    if (!filtered && !pick()) {
      return false;
    }
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
    inFlight.incrementAndGet();
    return true;
  }

  /**
   * Keeps one admitted row: the program's filter decides (a row that does not match costs
   * only its share of the budget), then the rate limit picks it or not, and a picked row is
   * rendered.
   */
  void capture(org.apache.spark.sql.Row row) {
    try {
      render(row);
    } finally {
      inFlight.decrementAndGet();
    }
  }

  /**
   * Waits until every admitted row's capture has ended, or until {@code deadlineNanos}
   * ({@link System#nanoTime}); a task that died between gate and capture only costs the wait.
   */
  void settle(long deadlineNanos) {
    while (inFlight.get() > 0 && System.nanoTime() - deadlineNanos < 0) {
      try {
        Thread.sleep(1);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return;
      }
    }
  }

  private void render(org.apache.spark.sql.Row row) {
    String json;
    String label = null;
    try {
      if (program == null) {
        json = row == null ? "null" : row.json();
      } else {
        // One partition index can run in two tasks at once (two queries reading this vertex,
        // speculation), and the program's converter and JSON writer keep per-call state: the
        // lock is taken only for admitted rows, so the per-record gate stays lock-free.
        synchronized (program) {
          org.apache.spark.sql.catalyst.InternalRow internal = program.internal(row);
          if (filtered) {
            long started = System.nanoTime();
            boolean matched = program.matches(internal);
            filterNanos += System.nanoTime() - started;
            if (filterNanos > round.filterBudgetNanos) {
              filterStopped = true;
            }
            if (!matched || !pick()) {
              reserved--;
              return;
            }
          }
          json = program.render(internal);
          label = program.label(internal);
        }
      }
    } finally {
      chargeBudget();
    }
    String data = json;
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
    Object[] record = {System.currentTimeMillis(), data, truncated, label};
    synchronized (this) {
      if (drained) {
        dropContention();
        return;
      }
      records.add(record);
      if (records.size() >= round.allowance) {
        thin();
      }
    }
  }

  /**
   * The buffer holds the round's allowance: keeps every other record (the first, the third...)
   * and doubles the stride, so that the records stay evenly spread over the rows seen and the
   * next ones are picked as far apart as the kept ones (caller holds {@code this}).
   */
  private void thin() {
    int size = records.size();
    int kept = 0;
    for (int i = 0; i < size; i += 2) {
      records.set(kept++, records.get(i));
    }
    records.subList(kept, size).clear();
    int thinned = size - kept;
    reserved -= thinned;
    DROPPED_RATE.setRelease(this, droppedRate + thinned);
    if ((size & 1) == 1) {
      nextPick += stride; // the record just taken stays: the next is two strides after it
    }
    stride *= 2;
  }

  private void chargeBudget() {
    if (admittedAt != 0) {
      budgetUsed += System.nanoTime() - admittedAt;
      admittedAt = 0;
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
      if (r[3] != null) {
        m.put(Messages.LABEL, r[3]);
      }
      out.add(m);
    }
    records.clear();
    HashMap<String, Object> m = new HashMap<>();
    m.put(Messages.PARTITION, partition);
    m.put(Messages.RECORDS, out);
    m.put(Messages.DROPPED_RATE, (long) DROPPED_RATE.getAcquire(this));
    m.put(Messages.DROPPED_CONTENTION, (long) DROPPED_CONTENTION.getAcquire(this));
    m.put(Messages.FILTER_STOPPED, filterStopped);
    return m;
  }
}
