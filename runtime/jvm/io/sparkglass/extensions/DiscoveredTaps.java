package io.sparkglass.extensions;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.sparkglass.sampling.TapErrors;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

/**
 * The taps {@link StreamTapRule} placed in this JVM, read by the driver's Python side
 * (Py4J: {@link #json()}) to register them with its round coordinator. Written once per query
 * start, never per row.
 */
public final class DiscoveredTaps {
  static final String KIND_QUERY = "query";
  static final String KIND_VIEW = "view";

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Map<String, Map<String, Object>> TAPS = new ConcurrentHashMap<>();
  private static final AtomicLong VERSION = new AtomicLong();
  private static final LongAdder RULE_ERRORS = new LongAdder();
  private static volatile String lastRuleError;

  private static final Map<String, Map<String, Object>> WRITES = new ConcurrentHashMap<>();
  private DiscoveredTaps() {}

  static void put(String tapKey, String kind, String name, String schemaJson,
      List<String> inputs, String sink, List<String> corruptColumns) {
    Map<String, Object> tap = new LinkedHashMap<>();
    tap.put("tapKey", tapKey);
    tap.put("kind", kind);
    tap.put("name", name);
    tap.put("schema", schemaJson);
    tap.put("inputs", inputs);
    tap.put("sink", sink);
    tap.put("corruptColumns", corruptColumns);
    tap.put("placedAtMs", System.currentTimeMillis());
    TAPS.put(tapKey, tap);
    VERSION.incrementAndGet();
  }

  static void putWrite(String table, List<String> inputs) {
    Map<String, Object> write = new LinkedHashMap<>();
    write.put("table", table);
    write.put("inputs", inputs);
    write.put("writtenAtMs", System.currentTimeMillis());
    WRITES.put(table, write);
    VERSION.incrementAndGet();
  }

  static void ruleFailed(String query, Throwable e) {
    RULE_ERRORS.increment();
    lastRuleError = "query " + query + ": " + e;
  }

  /** Bumped whenever a tap is placed: a cheap "anything new?" for a poller. */
  public static long version() {
    return VERSION.get();
  }

  /** Queries the rule could not tap (they run untapped). */
  public static long ruleErrors() {
    return RULE_ERRORS.sum();
  }

  /**
   * Everything as JSON: {@code {"version", "taps": [{tapKey, kind, name, schema, inputs,
   * sink, corruptColumns, placedAtMs}], "ruleErrors", "lastRuleError", "tapErrors",
   * "lastTapError"}}; {@code corruptColumns}: the tapped row's columns holding a source's raw
   * input ({@link CorruptRecordColumns}), which redaction masks.
   */
  public static String json() throws Exception {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("version", VERSION.get());
    out.put("taps", new ArrayList<>(TAPS.values()));
    out.put("ruleErrors", RULE_ERRORS.sum());
    out.put("lastRuleError", lastRuleError);
    out.put("tapErrors", TapErrors.count());
    out.put("lastTapError", TapErrors.last());
    out.put("writes", new ArrayList<>(WRITES.values()));
    return JSON.writeValueAsString(out);
  }

  /** Forgets every tap (tests; a new application in the same JVM). */
  public static void clear() {
    TAPS.clear();
    WRITES.clear();
    VERSION.incrementAndGet();
  }
}
