package io.sparkglass.sampling;

/**
 * Keys of the executor-driver messages.
 *
 * <p>Messages are plain JDK maps and lists of strings and numbers: the RPC layer
 * deserializes them with Spark's own class loader, which may not see this jar's classes.
 */
final class Messages {
  private Messages() {}

  static final String TYPE = "type";
  static final String POLL = "poll";
  static final String REPORT = "report";

  static final String EXECUTOR_ID = "executorId";
  static final String PID = "pid";
  /** In a poll: roundId to the partition indexes the executor has seen in that round. */
  static final String PROGRESS = "progress";

  static final String ROUNDS = "rounds";
  static final String ROUND_ID = "roundId";
  static final String TAP_KEY = "tapKey";
  static final String REMAINING_MS = "remainingMs";
  /** The round's sampling window, ms (its capture may last longer; absent: remainingMs). */
  static final String WINDOW_MS = "samplingWindowMs";
  static final String MAX_RATE = "maxSampleRate";
  static final String MAX_RECORD_LENGTH = "maxRecordLength";
  static final String BUDGET_MS = "tostringBudgetMs";
  static final String CANCELLED = "cancelled";
  /** A round's compiled {@link RowProgram}, base64 (absent: every column, no filter). */
  static final String PROGRAM = "program";

  /** In a report: a list of per-partition maps. */
  static final String PARTITIONS = "partitions";
  static final String PARTITION = "subtaskIndex";
  static final String RECORDS = "records";
  static final String DROPPED_RATE = "droppedByRateLimit";
  static final String DROPPED_CONTENTION = "droppedByContention";
  /** True when the round's filter used up its CPU budget in this partition and was stopped. */
  static final String FILTER_STOPPED = "filterStopped";
  static final String TIMESTAMP = "sampleTimestamp";
  static final String DATA = "data";
  static final String TRUNCATED = "truncated";
  /** A record's label: the expectations it failed, or its error (absent: none). */
  static final String LABEL = "label";
}
