package io.sparkglass.quality;

import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.spark.TaskContext;
import org.apache.spark.util.AccumulatorV2;

/**
 * The pass and fail counts of one vertex's expectations, as a Spark accumulator kept apart per
 * micro-batch, per place the counter runs and per partition.
 *
 * <p>On an executor, one copy per task counts into a plain array per <em>occurrence</em> (one
 * per {@link ExpectationCounter} compiled into a plan; see {@link #nextOccurrence()}):
 * {@code [rows, failures of expectation 1, ...]}, written by the task's thread only. The copy
 * knows its micro-batch and partition ({@link #countsFor}: the streaming query id and batch id
 * Spark sets as local properties of the batch's jobs, and the task's partition). On the
 * driver, Spark merges each successful task's copy into the registered instance before the
 * batch's job ends; the pipeline's query listener then {@link #take}s one micro-batch's counts
 * when its progress event arrives.
 *
 * <p>What is counted once: the counts of one occurrence are kept per partition, and of a
 * partition reported again (a speculative copy, a stage run again after a lost shuffle, a
 * second job over the same code) the report that saw the most rows is kept, never the sum (a
 * job that stops early, such as a {@code show()}, sees fewer); and of the occurrences of one
 * micro-batch (the vertex read on two paths of a plan, or by two jobs of a {@code
 * foreachBatch}), each of which saw every row of the vertex, {@link #take} gives the one that
 * counted the most rows.
 *
 * <p>Bounded: at most {@link #MAX_ENTRIES} partition entries ({@code 8 * (1 + expectations)}
 * bytes of counts each) over the micro-batches not yet taken; the oldest micro-batches are
 * dropped first and counted in {@link #droppedBatches()}. A micro-batch alone past half of that
 * keeps only its sums (a partition reported twice then counts twice).
 */
public final class ExpectationTally extends AccumulatorV2<long[], Map<String, long[]>> {
  private static final long serialVersionUID = 2L;
  /** Partition entries the driver keeps over the micro-batches not yet taken. */
  public static final int MAX_ENTRIES = 65_536;
  /** The local property with the streaming query's id (Spark's {@code StreamExecution}). */
  static final String QUERY_ID_PROPERTY = "sql.streaming.queryId";
  /** The local property with the micro-batch id (Spark's {@code MicroBatchExecution}). */
  static final String BATCH_ID_PROPERTY = "streaming.sql.batchId";
  /** The occurrence of interpreted evaluation (no code generated, so no number given). */
  static final int INTERPRETED = -1;

  private final int expectations;
  /** Task side: the micro-batch counted, set on first use in the task. */
  private String batch;
  /** Task side: the task's partition ({@code -1} outside a task). */
  private int partition = -1;
  /** Task side: counts per occurrence. */
  private final Map<Integer, long[]> taskCounts = new HashMap<>();
  /** Driver side: per micro-batch not yet taken, oldest first. */
  private transient Map<String, Batch> byBatch;
  private transient int entries;
  private transient long dropped;
  private transient int occurrences;

  /** A tally of {@code expectations} expectations (1 or more). */
  public ExpectationTally(int expectations) {
    if (expectations < 1) {
      throw new IllegalArgumentException("expectations must be 1 or more, got " + expectations);
    }
    this.expectations = expectations;
  }

  /** The key of a micro-batch: {@code <query id>/<batch id>} ({@code "/"} outside streaming). */
  public static String batchKey(String queryId, String batchId) {
    return (queryId == null ? "" : queryId) + "/" + (batchId == null ? "" : batchId);
  }

  /** Number of expectations counted. */
  public int expectations() {
    return expectations;
  }

  /** A new occurrence number: one per counter compiled into a plan (called where code is
   * generated). */
  public synchronized int nextOccurrence() {
    return occurrences++;
  }

  /**
   * The array this task counts occurrence {@code occurrence} into ({@code [rows, failures per
   * expectation]}); the first call in a task reads its micro-batch and partition. Called from
   * the task's thread, where the counting code is set up (generated code) or per row
   * (interpreted).
   */
  public long[] countsFor(int occurrence) {
    if (batch == null) {
      TaskContext task = TaskContext.get();
      if (task == null) {
        countingFor(batchKey(null, null), -1);
      } else {
        countingFor(batchKey(task.getLocalProperty(QUERY_ID_PROPERTY),
            task.getLocalProperty(BATCH_ID_PROPERTY)), task.partitionId());
      }
    }
    long[] counts = taskCounts.get(occurrence);
    if (counts == null) {
      counts = new long[1 + expectations];
      taskCounts.put(occurrence, counts);
    }
    return counts;
  }

  /** This copy, counting for micro-batch {@code key} ({@link #batchKey}) and {@code part}. */
  ExpectationTally countingFor(String key, int part) {
    batch = key;
    partition = part;
    return this;
  }

  @Override
  public boolean excludeFromHeartbeat() {
    // The counts are read while the task writes them: only a finished task's count is sent.
    return true;
  }

  @Override
  public synchronized boolean isZero() {
    for (long[] counts : taskCounts.values()) {
      for (long c : counts) {
        if (c != 0) {
          return false;
        }
      }
    }
    return byBatch == null || byBatch.isEmpty();
  }

  @Override
  public ExpectationTally copy() {
    // Spark ships copyAndReset() (this, then reset()) to tasks: the driver's map stays here.
    return new ExpectationTally(expectations);
  }

  @Override
  public synchronized void reset() {
    taskCounts.clear();
    batch = null;
    partition = -1;
    byBatch = null;
    entries = 0;
  }

  /** Adds {@code v} (rows, then failures per expectation) to this task's interpreted counts. */
  @Override
  public void add(long[] v) {
    if (v == null || v.length != 1 + expectations) {
      throw new IllegalArgumentException(
          "counts must have " + (1 + expectations) + " entries, got "
              + (v == null ? "null" : String.valueOf(v.length)));
    }
    long[] counts = countsFor(INTERPRETED);
    for (int i = 0; i < v.length; i++) {
      counts[i] += v[i];
    }
  }

  /** Merges a finished task's copy into the driver's counts of its micro-batch. */
  @Override
  public void merge(AccumulatorV2<long[], Map<String, long[]>> other) {
    if (!(other instanceof ExpectationTally)) {
      throw new UnsupportedOperationException(
          "cannot merge " + other.getClass().getName() + " into an ExpectationTally");
    }
    ExpectationTally task = (ExpectationTally) other;
    if (task.expectations != expectations) {
      throw new IllegalArgumentException("cannot merge a tally of " + task.expectations
          + " expectations into one of " + expectations);
    }
    String key = task.batch == null ? batchKey(null, null) : task.batch;
    synchronized (this) {
      for (Map.Entry<Integer, long[]> e : task.taskCounts.entrySet()) {
        if (e.getValue()[0] != 0) { // a task that saw no row: nothing to keep
          record(key, e.getKey(), task.partition, e.getValue());
        }
      }
    }
  }

  private void record(String key, int occurrence, int part, long[] counts) {
    if (byBatch == null) {
      byBatch = new LinkedHashMap<>();
    }
    Batch b = byBatch.get(key);
    if (b == null) {
      b = new Batch();
      byBatch.put(key, b);
    }
    Occurrence o = b.occurrences.get(occurrence);
    if (o == null) {
      o = new Occurrence(counts.length);
      b.occurrences.put(occurrence, o);
    }
    if (o.parts == null || part < 0) {
      add(o.sum, counts, 1);
      return;
    }
    long[] previous = o.parts.get(part);
    if (previous != null && previous[0] >= counts[0]) {
      return; // the partition again, seeing no more rows (a copy, or a job that stopped early)
    }
    o.parts.put(part, counts.clone());
    if (previous != null) {
      add(o.sum, previous, -1); // the partition again, seeing more rows: this count replaces
    } else {
      b.entries++;
      entries++;
    }
    add(o.sum, counts, 1);
    if (b.entries > MAX_ENTRIES / 2) {
      entries -= b.fold();
    }
    while (entries > MAX_ENTRIES && byBatch.size() > 1) {
      Iterator<Batch> oldest = byBatch.values().iterator();
      Batch gone = oldest.next();
      if (gone == b) {
        break;
      }
      oldest.remove();
      entries -= gone.entries;
      dropped++;
    }
  }

  private static void add(long[] sum, long[] counts, int sign) {
    for (int i = 0; i < sum.length; i++) {
      sum[i] += sign * counts[i];
    }
  }

  /** The counts per micro-batch not yet taken, as {@link #take} would give them (a copy). */
  @Override
  public synchronized Map<String, long[]> value() {
    Map<String, long[]> out = new HashMap<>();
    if (byBatch != null) {
      for (Map.Entry<String, Batch> e : byBatch.entrySet()) {
        out.put(e.getKey(), e.getValue().counts().clone());
      }
    }
    return out;
  }

  /**
   * Removes micro-batch {@code batchId} of query {@code queryId} and returns {@code
   * "<dropped>;<rows>,<failures of expectation 1>,..."} (one string: one Py4J call), or
   * {@code "<dropped>;"} when no task of it saw a row; {@code dropped} is
   * {@link #droppedBatches()}. Pass {@code null} for both outside streaming.
   */
  public synchronized String take(String queryId, String batchId) {
    Batch b = byBatch == null ? null : byBatch.remove(batchKey(queryId, batchId));
    StringBuilder out = new StringBuilder().append(dropped).append(';');
    if (b != null) {
      entries -= b.entries;
      long[] counts = b.counts();
      for (int i = 0; i < counts.length; i++) {
        out.append(i == 0 ? "" : ",").append(counts[i]);
      }
    }
    return out.toString();
  }

  /** Micro-batches dropped untaken because {@link #MAX_ENTRIES} were held. */
  public synchronized long droppedBatches() {
    return dropped;
  }

  @Override
  public String toString() {
    return "ExpectationTally(" + expectations + " expectations)";
  }

  /** One micro-batch on the driver. */
  private static final class Batch {
    final Map<Integer, Occurrence> occurrences = new HashMap<>();
    int entries;

    /** The occurrence that counted the most rows: each saw all of the vertex's rows. */
    long[] counts() {
      long[] best = null;
      for (Occurrence o : occurrences.values()) {
        if (best == null || o.sum[0] > best[0]) {
          best = o.sum;
        }
      }
      return best;
    }

    /** Keeps only the sums; returns the entries freed. */
    int fold() {
      for (Occurrence o : occurrences.values()) {
        o.parts = null;
      }
      int freed = entries;
      entries = 0;
      return freed;
    }
  }

  /** One place the counter ran in one micro-batch: sums, and the count of each partition. */
  private static final class Occurrence {
    final long[] sum;
    Map<Integer, long[]> parts = new HashMap<>();

    Occurrence(int width) {
      sum = new long[width];
    }
  }
}
