package io.sparkglass.sampling;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.io.ObjectStreamClass;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.CatalystTypeConverters;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.BindReferences;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/**
 * What one round does with a row its gate admitted, compiled on the driver and run on the
 * executors: an optional predicate (the round's filter), the rendering of the chosen columns
 * as Spark's {@code to_json} renders them, and an optional label (the failed expectations or
 * the error of a row, for rounds of kind {@code violations} and {@code errors}).
 *
 * <p>The expressions are Catalyst expressions bound to the tap's row (the vertex output after
 * redaction), serialized with Java serialization and sent to executors inside the round. An
 * executor keeps one copy per partition, because some expressions ({@code to_json}) keep a
 * writer and are not thread-safe. Evaluation never throws to a task: a failing predicate
 * counts as not matching.
 */
public final class RowProgram implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final ObjectMapper JSON = new ObjectMapper();

  private final StructType schema;
  private final Expression filter;
  private final Expression render;
  private final Expression label;
  private transient scala.Function1<Object, Object> toCatalyst;

  private RowProgram(StructType schema, Expression filter, Expression render, Expression label) {
    this.schema = schema;
    this.filter = filter;
    this.render = render;
    this.label = label;
  }

  boolean filtered() {
    return filter != null;
  }

  /** The tap's row (an external {@code Row} given to the capture UDF) as Catalyst sees it. */
  InternalRow internal(Row row) {
    if (toCatalyst == null) {
      toCatalyst = CatalystTypeConverters.createToCatalystConverter(schema);
    }
    return (InternalRow) toCatalyst.apply(row);
  }

  /** True when the row matches the filter (always, without one); false when it fails. */
  boolean matches(InternalRow row) {
    if (filter == null) {
      return true;
    }
    try {
      return Boolean.TRUE.equals(filter.eval(row));
    } catch (Throwable e) {
      return false;
    }
  }

  /** The chosen columns as JSON (null fields included). */
  String render(InternalRow row) {
    Object out = render.eval(row);
    return out == null ? "null" : out.toString();
  }

  /** The row's label, or null (no label expression, or it gave null). */
  String label(InternalRow row) {
    if (label == null) {
      return null;
    }
    try {
      Object out = label.eval(row);
      return out == null ? null : out.toString();
    } catch (Throwable e) {
      return null;
    }
  }

  /**
   * Compiles a round's program against the tap's row type (called from Python on the driver).
   *
   * @param schemaJson the tap's row type, Spark's JSON schema form
   * @param filterSql a Spark SQL predicate over its columns, or null
   * @param columns the columns to render, in order, or null for all
   * @param labelSql a string expression labelling each row, or null
   * @return JSON {@code {"program": base64, "dataType": "struct<...>", "references": [...],
   *     "deterministic": bool, "likePatterns": [[pattern, escape]...]}} (the patterns of a
   *     checked filter's LIKEs, for the caller's own refusal of patterns that backtrack)
   * @throws Exception Spark's ParseException or AnalysisException for a bad filter or column
   */
  public static String compile(SparkSession spark, String schemaJson, String filterSql,
      String[] columns, String labelSql) throws Exception {
    return compile(spark, schemaJson, filterSql, columns, labelSql, null);
  }

  /**
   * As {@link #compile(SparkSession, String, String, String[], String, String, boolean)}, the
   * filter not checked against the allowlist (the runtime's own filters and labels).
   */
  public static String compile(SparkSession spark, String schemaJson, String filterSql,
      String[] columns, String labelSql, String[] renders) throws Exception {
    return compile(spark, schemaJson, filterSql, columns, labelSql, renders, false);
  }

  /**
   * Compiles a round's program, with {@code renders}: for each of {@code columns}, the Spark
   * SQL expression that renders it (named as the column), or null for the column as it is. A
   * tap whose row is the vertex's raw row (the session extension's) renders masked and hashed
   * columns this way, so the redaction still runs on the executor before the row leaves it.
   *
   * <p>With {@code checkFilter} (a request's own filter) the filter is held to
   * {@link FilterAllowlist} on its parsed form before Spark's analyzer sees it, and on its
   * analysed form before anything is bound: nothing of a refused filter is ever evaluated.
   *
   * @throws FilterAllowlist.Refused a filter the allowlist refuses (the message says why)
   */
  public static String compile(SparkSession spark, String schemaJson, String filterSql,
      String[] columns, String labelSql, String[] renders, boolean checkFilter)
      throws Exception {
    List<List<String>> likePatterns = new ArrayList<>();
    if (checkFilter && filterSql != null) {
      FilterAllowlist.checkParsed(
          spark.sessionState().sqlParser().parseExpression(filterSql), likePatterns);
    }
    StructType schema = (StructType) DataType.fromJson(schemaJson);
    org.apache.spark.sql.Dataset<Row> empty =
        spark.createDataFrame(new ArrayList<Row>(), schema);
    List<Column> chosen = new ArrayList<>();
    if (columns == null) {
      for (String name : schema.fieldNames()) {
        chosen.add(functions.col(quote(name)));
      }
    } else {
      for (int i = 0; i < columns.length; i++) {
        String render = renders == null ? null : renders[i];
        chosen.add(render == null ? functions.col(quote(columns[i]))
            : functions.expr(render).as(columns[i]));
      }
    }
    Map<String, String> options = new LinkedHashMap<>();
    options.put("ignoreNullFields", "false");
    Column struct = functions.struct(chosen.toArray(new Column[0]));
    List<Column> outputs = new ArrayList<>();
    outputs.add(functions.to_json(struct, options).as("render"));
    outputs.add(struct.as("chosen"));
    if (filterSql != null) {
      outputs.add(functions.expr(filterSql).cast("boolean").as("filter"));
    }
    if (labelSql != null) {
      outputs.add(functions.expr(labelSql).cast("string").as("label"));
    }
    org.apache.spark.sql.Dataset<Row> query = empty.select(outputs.toArray(new Column[0]));
    LogicalPlan analyzed =
        ((org.apache.spark.sql.classic.Dataset<Row>) query).queryExecution().analyzed();
    // Some built-ins (to_json among them) are RuntimeReplaceable: they run only once the
    // optimizer's ReplaceExpressions put their replacement in; the rest of the optimizer
    // would fold a query over an empty relation away, so only that rule is applied.
    analyzed = org.apache.spark.sql.catalyst.optimizer.ReplaceExpressions$.MODULE$.apply(analyzed);
    if (!(analyzed instanceof Project)) {
      throw new IllegalStateException("unexpected plan for a round program: " + analyzed);
    }
    Project project = (Project) analyzed;
    Object input = attributeSeq(project.child().output());
    scala.collection.Seq<NamedExpression> list = project.projectList();
    Expression render = bind((Expression) list.apply(0), input);
    Expression chosenStruct = ((Alias) list.apply(1)).child();
    Expression filter = null;
    Expression label = null;
    int next = 2;
    List<String> references = new ArrayList<>();
    boolean deterministic = true;
    if (filterSql != null) {
      Expression raw = ((Alias) list.apply(next++)).child();
      scala.collection.Iterator<Attribute> refs = raw.references().iterator();
      while (refs.hasNext()) {
        references.add(refs.next().name());
      }
      if (checkFilter) {
        FilterAllowlist.checkAnalysed(raw);
      }
      deterministic = raw.deterministic();
      filter = bind(raw, input);
    }
    if (labelSql != null) {
      label = bind(((Alias) list.apply(next)).child(), input);
    }
    RowProgram program = new RowProgram(schema, filter, render, label);
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (ObjectOutputStream out = new ObjectOutputStream(bytes)) {
      out.writeObject(program);
    }
    Map<String, Object> answer = new LinkedHashMap<>();
    answer.put("program", Base64.getEncoder().encodeToString(bytes.toByteArray()));
    answer.put("dataType", chosenStruct.dataType().simpleString());
    answer.put("references", references);
    answer.put("deterministic", deterministic);
    answer.put("likePatterns", likePatterns);
    return JSON.writeValueAsString(answer);
  }

  // Catalyst's AttributeSeq lives in the Scala package object `expressions.package`, a name
  // Java source cannot spell: reached by reflection.
  private static final String ATTRIBUTE_SEQ =
      "org.apache.spark.sql.catalyst.expressions.package$AttributeSeq";

  private static Object attributeSeq(scala.collection.immutable.Seq<Attribute> attrs)
      throws ReflectiveOperationException {
    Class<?> cls = Class.forName(ATTRIBUTE_SEQ, true, Expression.class.getClassLoader());
    return cls.getConstructor(scala.collection.immutable.Seq.class).newInstance(attrs);
  }

  private static Expression bind(Expression e, Object input) throws ReflectiveOperationException {
    Expression inner = e instanceof Alias ? ((Alias) e).child() : e;
    Class<?> cls = Class.forName(ATTRIBUTE_SEQ, true, Expression.class.getClassLoader());
    java.lang.reflect.Method m =
        BindReferences.class.getMethod("bindReference", Expression.class, cls, boolean.class);
    return (Expression) m.invoke(null, inner, input, false);
  }

  private static String quote(String name) {
    return "`" + name.replace("`", "``") + "`";
  }

  /**
   * A diagnostic for fuzzers and benchmarks: the time, in nanoseconds, the executors' own
   * evaluation of a compiled program's filter takes on each of {@code rows} (collected to the
   * driver), the longest first element, then each row's in order.
   *
   * @param program a compiled program, base64 as {@link #compile} returns it
   */
  public static long[] filterNanos(String program, java.util.List<Row> rows) {
    RowProgram p = decode(bytesOf(program));
    long[] out = new long[rows.size() + 1];
    for (int i = 0; i < rows.size(); i++) {
      InternalRow internal = p.internal(rows.get(i));
      long started = System.nanoTime();
      p.matches(internal);
      out[i + 1] = System.nanoTime() - started;
      out[0] = Math.max(out[0], out[i + 1]);
    }
    return out;
  }

  /** Programs (a hash of their bytes) this JVM has run {@link #WARM_RUNS} times (bounded). */
  private static final java.util.Set<Long> WARMED =
      java.util.concurrent.ConcurrentHashMap.newKeySet();
  private static final int MAX_WARMED = 256;
  private static final int WARM_RUNS = 2000;
  private static final long WARM_NANOS = 100_000_000L;

  /**
   * Runs a copy of a round's program on a row of default values (zeros, empty strings, empty
   * collections) as a partition's copy runs on a task's row: {@link #WARM_RUNS} times (100 ms at
   * most) the first time this JVM sees the program, once after that. So the JVM's one-time
   * costs of the first renders (loading the converters' and the JSON writer's classes, then
   * compiling them: a cold executor's first render took 70 ms to 330 ms and the next ones
   * about 0.8 ms, against 0.03 ms to 0.1 ms warm) are paid by the caller, the executor plugin's
   * poller before the round's taps open, and not by the first rows the tasks hand over, whose
   * renders would use up their partition's rendering budget. Best effort: never throws.
   *
   * @param bytes a compiled program (see {@link #compile}), or null (nothing to do)
   */
  static void warmUp(byte[] bytes) {
    if (bytes == null) {
      return;
    }
    try {
      RowProgram p = decode(bytes);
      org.apache.spark.sql.types.StructField[] fields = p.schema.fields();
      Object[] values = new Object[fields.length];
      // Literal.default(dataType): a name Java source cannot call ("default" is a keyword).
      java.lang.reflect.Method literal = org.apache.spark.sql.catalyst.expressions.Literal.class
          .getMethod("default", DataType.class);
      for (int i = 0; i < fields.length; i++) {
        try {
          values[i] = ((org.apache.spark.sql.catalyst.expressions.Literal) literal.invoke(null,
              fields[i].dataType())).value();
        } catch (ReflectiveOperationException | RuntimeException e) {
          values[i] = null; // a type without a default (a user-defined type): null
        }
      }
      Row external = (Row) CatalystTypeConverters.createToScalaConverter(p.schema)
          .apply(new org.apache.spark.sql.catalyst.expressions.GenericInternalRow(values));
      long key = ((long) java.util.Arrays.hashCode(bytes) << 32) | bytes.length;
      boolean first = WARMED.size() < MAX_WARMED && WARMED.add(key);
      int runs = first ? WARM_RUNS : 1;
      long until = System.nanoTime() + WARM_NANOS;
      for (int i = 0; i < runs && System.nanoTime() - until < 0; i++) {
        InternalRow internal = p.internal(external);
        p.matches(internal);
        p.render(internal);
        p.label(internal);
      }
    } catch (Throwable e) {
      // A warm-up that fails costs the first rows their render time, nothing else.
    }
  }

  /** A program sent by the driver (see {@link #compile}); one copy per partition. */
  static RowProgram decode(byte[] bytes) {
    try (ObjectInputStream in = new LoaderInputStream(new ByteArrayInputStream(bytes))) {
      return (RowProgram) in.readObject();
    } catch (IOException | ClassNotFoundException e) {
      throw new IllegalArgumentException("cannot read a round program", e);
    }
  }

  static byte[] bytesOf(String base64) {
    return base64 == null || base64.isEmpty() ? null : Base64.getDecoder().decode(base64);
  }

  /** Resolves classes with the task's loader first, then the one that loaded this jar. */
  private static final class LoaderInputStream extends ObjectInputStream {
    LoaderInputStream(InputStream in) throws IOException {
      super(in);
    }

    @Override
    protected Class<?> resolveClass(ObjectStreamClass desc)
        throws IOException, ClassNotFoundException {
      ClassLoader context = Thread.currentThread().getContextClassLoader();
      if (context != null) {
        try {
          return Class.forName(desc.getName(), false, context);
        } catch (ClassNotFoundException e) {
          // fall through
        }
      }
      try {
        return Class.forName(desc.getName(), false, RowProgram.class.getClassLoader());
      } catch (ClassNotFoundException e) {
        return super.resolveClass(desc);
      }
    }
  }
}
