package io.sparkglass.extensions;

import java.lang.reflect.Method;
import java.util.ArrayList;
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
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Union;
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
 * through renames and expressions built from it (an alias of anything that reads a marked
 * column is marked; so is a column a node makes from marked inputs without naming them, a
 * {@code Generate}'s or a {@code Union}'s). Columns named like a declared corrupt-record
 * column (an option of a leaf or of an expression such as {@code from_json}, or the session's
 * default) are included too. Read once per tap, on the driver; never per row.
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
    Set<ExprId> aliased = new HashSet<>();
    boolean readsMarked = false;
    for (Expression e : CollectionConverters.asJava(plan.expressions())) {
      boolean reads = readsMarked(e, marked);
      readsMarked |= reads;
      if (e instanceof NamedExpression) {
        aliased.add(((NamedExpression) e).exprId());
        if (e instanceof Alias && reads) {
          marked.add(((Alias) e).exprId());
        }
      }
    }
    List<Attribute> output = CollectionConverters.asJava(plan.output());
    for (int i = 0; i < output.size(); i++) {
      ExprId id = output.get(i).exprId();
      if (inherited.contains(id) || aliased.contains(id)) {
        continue;
      }
      // A column this node makes without an alias of its own.
      if (plan instanceof Union) {
        for (LogicalPlan child : children) {
          List<Attribute> childOutput = CollectionConverters.asJava(child.output());
          if (i < childOutput.size() && marked.contains(childOutput.get(i).exprId())) {
            marked.add(id);
          }
        }
      } else if (readsMarked) {
        marked.add(id);
      }
    }
  }

  private static boolean readsMarked(Expression e, Set<ExprId> marked) {
    if (marked.isEmpty()) {
      return false;
    }
    for (Attribute a : CollectionConverters.asJava(e.references().toSeq())) {
      if (marked.contains(a.exprId())) {
        return true;
      }
    }
    return false;
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
