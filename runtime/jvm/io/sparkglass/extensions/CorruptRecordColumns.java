package io.sparkglass.extensions;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GetArrayStructFields;
import org.apache.spark.sql.catalyst.expressions.GetStructField;
import org.apache.spark.sql.catalyst.plans.logical.Aggregate;
import org.apache.spark.sql.catalyst.plans.logical.Expand;
import org.apache.spark.sql.catalyst.plans.logical.Generate;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.SetOperation;
import org.apache.spark.sql.catalyst.plans.logical.UnionBase;
import org.apache.spark.sql.catalyst.plans.logical.Window;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The columns of a plan's output that hold a source's raw input: its corrupt-record column,
 * whatever it is called. A CSV/JSON/XML reader puts the unparsed line into the column its
 * option {@code columnNameOfCorruptRecord} names (or {@code spark.sql.columnNameOfCorruptRecord},
 * default {@code _corrupt_record}); that line holds every field, redacted ones included, so
 * redaction masks such columns (sparkglass.runtime.contract.redaction).
 *
 * <p>Found in the analysed plan, not by name alone: at each leaf the option is read from the
 * relation's options (a streaming source's {@code DataSource}, a file relation's, a v2
 * relation's), the leaf's column of that name is marked, and the mark follows it up the plan
 * through renames and expressions built from it: an alias (of a {@code Project},
 * {@code Aggregate}, {@code Window}) of anything that reads a marked column; column i of a
 * set operation ({@code Union}, {@code Intersect}, {@code Except}: they keep the first child's
 * ids) when column i of any child is marked; a {@code Generate}'s generated columns when its
 * generator reads one; column i of an {@code Expand} (rollup, cube) when any of its
 * projections' expression i reads one; any other column a node makes when the node reads one
 * (a mapInPandas: all of it). Extracting a struct field named like a declared
 * corrupt-record column ({@code from_json(...).raw}) counts as reading one. Columns named like
 * a declared corrupt-record column (an option of a leaf or of an expression such as
 * {@code from_json}, or the session's default) are included too. Read once per tap, on the
 * driver; never per row.
 */
public final class CorruptRecordColumns {
  /** The reader option naming the column. */
  public static final String OPTION = "columnNameOfCorruptRecord";

  private static final String[] HOLDERS = {"dataSource", "relation", "options", "extraOptions"};

  private CorruptRecordColumns() {}

  /** {@link #names(LogicalPlan, String)} of {@code df}'s analysed plan (called from Python). */
  public static String[] of(Dataset<?> df, String sessionDefault) {
    LogicalPlan plan =
        ((org.apache.spark.sql.classic.Dataset<?>) df).queryExecution().analyzed();
    return names(plan, sessionDefault).toArray(new String[0]);
  }

  /**
   * The output columns of {@code plan} holding raw input, in output order.
   *
   * @param sessionDefault {@code spark.sql.columnNameOfCorruptRecord} (null: none)
   */
  public static List<String> names(LogicalPlan plan, String sessionDefault) {
    Set<String> declared = new HashSet<>();
    if (sessionDefault != null && !sessionDefault.trim().isEmpty()) {
      declared.add(sessionDefault.toLowerCase(Locale.ROOT));
    }
    Set<ExprId> marked = new HashSet<>();
    mark(plan, declared, marked, sessionDefault);
    Set<String> out = new LinkedHashSet<>();
    for (Attribute a : CollectionConverters.asJava(plan.output())) {
      if (marked.contains(a.exprId()) || declared.contains(a.name().toLowerCase(Locale.ROOT))) {
        out.add(a.name());
      }
    }
    return new ArrayList<>(out);
  }

  private static void mark(LogicalPlan plan, Set<String> declared, Set<ExprId> marked,
      String sessionDefault) {
    List<LogicalPlan> children = CollectionConverters.asJava(plan.children());
    for (LogicalPlan child : children) {
      mark(child, declared, marked, sessionDefault);
    }
    for (Expression e : CollectionConverters.asJava(plan.expressions())) {
      expressionOptions(e, declared);
    }
    if (children.isEmpty()) {
      Set<String> names = new HashSet<>();
      for (Object holder : holders(plan)) {
        options(holder, names);
      }
      if (names.isEmpty() && sessionDefault != null) {
        names.add(sessionDefault.toLowerCase(Locale.ROOT));
      }
      declared.addAll(names);
      for (Attribute a : CollectionConverters.asJava(plan.output())) {
        if (names.contains(a.name().toLowerCase(Locale.ROOT))) {
          marked.add(a.exprId());
        }
      }
      return;
    }
    Set<ExprId> inherited = new HashSet<>();
    for (LogicalPlan child : children) {
      for (Attribute a : CollectionConverters.asJava(child.output())) {
        inherited.add(a.exprId());
      }
    }
    List<Attribute> output = CollectionConverters.asJava(plan.output());
    if (positional(plan, children, output)) {
      // Union, Intersect, Except, a recursive CTE's loop: column i is column i of every
      // child, under the first child's id; raw input in any child makes it raw input.
      for (int i = 0; i < output.size(); i++) {
        for (LogicalPlan child : children) {
          List<Attribute> childOutput = CollectionConverters.asJava(child.output());
          if (i < childOutput.size() && marked.contains(childOutput.get(i).exprId())) {
            marked.add(output.get(i).exprId());
          }
        }
      }
      return;
    }
    if (plan instanceof Generate) {
      // explode/posexplode/inline...: the generated columns come from the generator alone.
      Generate generate = (Generate) plan;
      if (readsMarked((Expression) (Object) generate.generator(), marked, declared)) {
        for (Attribute a : CollectionConverters.asJava(generate.generatorOutput())) {
          marked.add(a.exprId());
        }
      }
      return;
    }
    if (plan instanceof Expand) {
      // rollup/cube/grouping sets: output i is projection i of every grouping set.
      Expand expand = (Expand) plan;
      for (scala.collection.Seq<Expression> projection
          : CollectionConverters.asJava(expand.projections())) {
        List<Expression> row = CollectionConverters.asJava(projection);
        for (int i = 0; i < row.size() && i < output.size(); i++) {
          if (readsMarked(row.get(i), marked, declared)) {
            marked.add(output.get(i).exprId());
          }
        }
      }
      return;
    }
    boolean aliasing = plan instanceof Project || plan instanceof Aggregate
        || plan instanceof Window;
    Map<ExprId, Alias> aliases = new HashMap<>();
    boolean readsMarked = false;
    for (Expression e : CollectionConverters.asJava(plan.expressions())) {
      boolean reads = readsMarked(e, marked, declared);
      readsMarked |= reads;
      if (e instanceof Alias) {
        aliases.put(((Alias) e).exprId(), (Alias) e);
        if (aliasing && reads) {
          marked.add(((Alias) e).exprId());
        }
      }
    }
    if (!readsMarked) {
      // What a node consumes beyond its expressions (an object consumer reads its child).
      for (Attribute a : CollectionConverters.asJava(plan.references().toSeq())) {
        readsMarked |= marked.contains(a.exprId());
      }
    }
    for (Attribute a : output) {
      ExprId id = a.exprId();
      if (inherited.contains(id) || marked.contains(id)) {
        continue;
      }
      // A column this node makes: from its own alias when it has one, else (mapInPandas,
      // a typed map, a script transform...) from anything the node reads.
      Alias alias = aliases.get(id);
      if (alias != null ? readsMarked(alias, marked, declared) : readsMarked) {
        marked.add(id);
      }
    }
  }

  /** True for a node whose column i is column i of each child (set operations). */
  private static boolean positional(LogicalPlan plan, List<LogicalPlan> children,
      List<Attribute> output) {
    if (plan instanceof UnionBase || plan instanceof SetOperation) {
      return true;
    }
    if (children.size() < 2) {
      return false;
    }
    List<Attribute> first = CollectionConverters.asJava(children.get(0).output());
    if (first.size() != output.size()) {
      return false;
    }
    for (int i = 0; i < output.size(); i++) {
      if (!first.get(i).exprId().equals(output.get(i).exprId())) {
        return false;
      }
    }
    for (LogicalPlan child : children) {
      if (child.output().size() != output.size()) {
        return false;
      }
    }
    return true;
  }

  /**
   * True when {@code e} reads a marked column, or extracts a struct field named like a
   * declared corrupt-record column ({@code from_json(...).raw}).
   */
  private static boolean readsMarked(Expression e, Set<ExprId> marked, Set<String> declared) {
    if (!marked.isEmpty()) {
      for (Attribute a : CollectionConverters.asJava(e.references().toSeq())) {
        if (marked.contains(a.exprId())) {
          return true;
        }
      }
    }
    return extractsDeclared(e, declared);
  }

  private static boolean extractsDeclared(Expression e, Set<String> declared) {
    String field = null;
    if (e instanceof GetStructField) {
      field = fieldName((GetStructField) e);
    } else if (e instanceof GetArrayStructFields) {
      field = ((GetArrayStructFields) e).field().name();
    }
    if (field != null && declared.contains(field.toLowerCase(Locale.ROOT))) {
      return true;
    }
    for (Expression child : CollectionConverters.asJava(e.children())) {
      if (extractsDeclared(child, declared)) {
        return true;
      }
    }
    return false;
  }

  private static String fieldName(GetStructField get) {
    try {
      return get.extractFieldName();
    } catch (RuntimeException e) {
      return get.name().isDefined() ? get.name().get() : null;
    }
  }

  /** Objects of a leaf that may hold reader options (found by accessor name, any version). */
  private static List<Object> holders(LogicalPlan leaf) {
    List<Object> out = new ArrayList<>();
    for (String name : HOLDERS) {
      Object value = call(leaf, name);
      if (value == null) {
        continue;
      }
      out.add(value);
      for (String inner : HOLDERS) {
        Object nested = call(value, inner);
        if (nested != null) {
          out.add(nested);
        }
      }
    }
    return out;
  }

  private static Object call(Object target, String name) {
    try {
      Method m = target.getClass().getMethod(name);
      return m.getParameterCount() == 0 ? m.invoke(target) : null;
    } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
      return null;
    }
  }

  /** Adds the value of {@link #OPTION} (any case) in {@code holder}, when it is a map. */
  private static void options(Object holder, Set<String> names) {
    if (holder instanceof scala.collection.Map) {
      holder = CollectionConverters.asJava((scala.collection.Map<?, ?>) holder);
    }
    if (!(holder instanceof Map)) {
      return;
    }
    for (Map.Entry<?, ?> entry : ((Map<?, ?>) holder).entrySet()) {
      if (entry.getKey() != null && entry.getValue() != null
          && OPTION.equalsIgnoreCase(entry.getKey().toString())
          && !entry.getValue().toString().trim().isEmpty()) {
        names.add(entry.getValue().toString().toLowerCase(Locale.ROOT));
      }
    }
  }

  /** Options of expressions that parse text into columns ({@code from_json}, {@code from_csv}). */
  private static void expressionOptions(Expression e, Set<String> names) {
    Object options = call(e, "options");
    if (options != null) {
      options(options, names);
    }
    for (Expression child : CollectionConverters.asJava(e.children())) {
      expressionOptions(child, names);
    }
  }
}
