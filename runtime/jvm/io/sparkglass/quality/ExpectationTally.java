package io.sparkglass.quality;

import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.spark.TaskContext;
import org.apache.spark.util.AccumulatorV2;

/**
 * The pass and fail counts of one vertex's expectations, as a Spark accumulator kept apart per
 * micro-batch.
 *
 * <p>On an executor, one copy per task counts into {@link #counts}: {@code counts[0]} the rows
 * seen, {@code counts[1 + i]} the rows failing expectation {@code i} (a plain array: the
 * {@link ExpectationCounter}'s generated code increments it, one task per copy, so no lock).
 * The copy knows its micro-batch ({@link #forTask()}: the streaming query id and batch id
 * Spark sets as local properties of the batch's jobs). On the driver, Spark merges each
 * successful task's copy into the registered instance, keyed by that micro-batch, before the
 * batch's job ends; the pipeline's query listener then {@link #take}s one micro-batch's exact
 * counts when the batch's progress event arrives.
 *
 * <p>Bounded: the driver keeps at most {@link #MAX_BATCHES} micro-batches not yet taken (each
 * {@code 8 * (1 + expectations)} bytes of counts plus its key); older ones are dropped and
 * counted in {@link #droppedBatches()}. Like every accumulator updated inside a
 * transformation, a stage Spark runs again counts its rows again; failed task attempts count
 * nothing.
 */
public final class ExpectationTally extends AccumulatorV2<long[], Map<String, long[]>> {
  private static final long serialVersionUID = 1L;
  /** Micro-batches the driver keeps until taken: the listener takes each within seconds. */
  public static final int MAX_BATCHES = 256;
  /** The local property with the streaming query's id (Spark's {@code StreamExecution}). */
  static final String QUERY_ID_PROPERTY = "sql.streaming.queryId";
  /** The local property with the micro-batch id (Spark's {@code MicroBatchExecution}). */
  static final String BATCH_ID_PROPERTY = "streaming.sql.batchId";

  private final int expectations;
  /** Task side: rows seen, then the rows failing each expectation. */
  public final long[] counts;
  /** Task side: the micro-batch counted, set by {@link #forTask()}. */
  private String batch;
  /** Driver side: merged counts per micro-batch not yet taken, oldest first. */
  private transient Map<String, long[]> byBatch;
  private transient long dropped;

  /** A tally of {@code expectations} expectations (1 or more). */
  public ExpectationTally(int expectations) {
    if (expectations < 1) {
      throw new IllegalArgumentException("expectations must be 1 or more, got " + expectations);
    }
    this.expectations = expectations;
    this.counts = new long[1 + expectations];
  }

  /** The key of a micro-batch: {@code <query id>/<batch id>} ({@code "/"} outside streaming). */
  public static String batchKey(String queryId, String batchId) {
    return (queryId == null ? "" : queryId) + "/" + (batchId == null ? "" : batchId);
  }

  /** Number of expectations counted. */
  public int expectations() {
    return expectations;
  }

  /**
   * This task's copy, its micro-batch read from the running task's local properties (once).
   * Called where the counting code is set up, in the task's thread.
   */
  public ExpectationTally forTask() {
    if (batch == null) {
      TaskContext task = TaskContext.get();
      return countingFor(task == null
          ? batchKey(null, null)
          : batchKey(task.getLocalProperty(QUERY_ID_PROPERTY),
              task.getLocalProperty(BATCH_ID_PROPERTY)));
    }
    return this;
  }

  /** This copy, counting for micro-batch {@code key} ({@link #batchKey}). */
  ExpectationTally countingFor(String key) {
    batch = key;
    return this;
  }

  @Override
  public boolean excludeFromHeartbeat() {
    // The counts are read while the task writes them: only a finished task's count is sent.
    return true;
  }

  @Override
  public synchronized boolean isZero() {
    for (long c : counts) {
      if (c != 0) {
        return false;
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
    Arrays.fill(counts, 0L);
    batch = null;
    byBatch = null;
  }

  /** Adds {@code v} (rows, then failures per expectation) to this task's counts. */
  @Override
  public void add(long[] v) {
    if (v == null || v.length != counts.length) {
      throw new IllegalArgumentException(
          "counts must have " + counts.length + " entries, got "
              + (v == null ? "null" : String.valueOf(v.length)));
    }
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
    if (task.counts.length != counts.length) {
      throw new IllegalArgumentException("cannot merge a tally of " + task.expectations
          + " expectations into one of " + expectations);
    }
    if (task.counts[0] == 0) {
      return; // the task saw no row: nothing to keep
    }
    String key = task.batch == null ? batchKey(null, null) : task.batch;
    synchronized (this) {
      if (byBatch == null) {
        byBatch = new LinkedHashMap<>();
      }
      long[] sum = byBatch.get(key);
      if (sum == null) {
        while (byBatch.size() >= MAX_BATCHES) {
          Iterator<String> oldest = byBatch.keySet().iterator();
          oldest.next();
          oldest.remove();
          dropped++;
        }
        sum = new long[counts.length];
        byBatch.put(key, sum);
      }
      for (int i = 0; i < sum.length; i++) {
        sum[i] += task.counts[i];
      }
    }
  }

  /** The counts per micro-batch not yet taken (a copy). */
  @Override
  public synchronized Map<String, long[]> value() {
    if (byBatch == null) {
      return Collections.emptyMap();
    }
    Map<String, long[]> out = new HashMap<>();
    for (Map.Entry<String, long[]> e : byBatch.entrySet()) {
      out.put(e.getKey(), e.getValue().clone());
    }
    return out;
  }

  /**
   * Removes and returns the counts of micro-batch {@code batchId} of query {@code queryId}
   * (rows, then failures per expectation), or {@code null} when no task of it saw a row.
   * Pass {@code null} for both outside streaming.
   */
  public synchronized long[] take(String queryId, String batchId) {
    return byBatch == null ? null : byBatch.remove(batchKey(queryId, batchId));
  }

  /** Micro-batches dropped unread because {@link #MAX_BATCHES} were waiting. */
  public synchronized long droppedBatches() {
    return dropped;
  }

  @Override
  public String toString() {
    return "ExpectationTally(" + expectations + " expectations)";
  }
}
