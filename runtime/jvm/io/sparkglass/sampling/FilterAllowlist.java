package io.sparkglass.sampling;

import java.util.List;
import java.util.Locale;
import java.util.Set;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.UnaryMinus;
import org.apache.spark.sql.types.IntegralType;
import org.apache.spark.sql.types.StringType;

/**
 * What a round's filter may be made of, checked before anything of it is evaluated.
 *
 * <p>A filter runs on the application's task threads for every row a gate admits, so only
 * cheap deterministic built-ins are allowed. The check runs twice. First on the <em>parsed</em>
 * expression, before Spark's analyzer sees it: the analyzer evaluates some constant arguments
 * while it resolves a call (a {@code round} scale, a pattern), so an argument such as
 * {@code length(repeat('y', 150000000))} would run on the driver before any allowlist of the
 * analysed tree could refuse it. Then on the analysed tree, which is what the executors run
 * (classes after {@code ReplaceExpressions}), as a backstop. Arguments whose size sets the
 * cost are bounded: a {@code round}/{@code bround} scale is an integer literal within
 * &plusmn;{@value #MAX_ROUND_SCALE} (on a double Spark evaluates {@code BigDecimal.setScale},
 * whose time grows with the scale), and a LIKE/ILIKE pattern is a plain string literal, read
 * without evaluating anything.
 */
final class FilterAllowlist {
  private FilterAllowlist() {}

  /** A filter the allowlist refuses; the message names what and why (no "filter:" prefix). */
  static final class Refused extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    Refused(String message) {
      super(message);
    }
  }

  /** The largest scale {@code round}/{@code bround} may take (a decimal's precision). */
  static final int MAX_ROUND_SCALE = 38;

  /** What a filter may use, as refusals say it. */
  static final String RULE =
      "a filter runs in the application's tasks, so it may use only cheap deterministic "
          + "built-ins: comparisons, AND/OR/NOT, arithmetic, abs/round, [I]LIKE, IN, "
          + "IS [NOT] NULL, BETWEEN, CASE/IF, CAST, COALESCE, to_date, lower/upper/trim/"
          + "ltrim/rtrim/length/substring/startswith/endswith/contains and date/time fields "
          + "(year ... second)";

  private static final String PACKAGE = "org.apache.spark.sql.catalyst.expressions.";
  private static final String ANALYSIS = "org.apache.spark.sql.catalyst.analysis.";

  /** Classes of the parsed expression (the parser's own nodes for SQL syntax). */
  private static final Set<String> PARSED =
      Set.of(
          ANALYSIS + "UnresolvedAttribute",
          ANALYSIS + "UnresolvedExtractValue",
          ANALYSIS + "UnresolvedFunction",
          PACKAGE + "Literal",
          PACKAGE + "And",
          PACKAGE + "Or",
          PACKAGE + "Not",
          PACKAGE + "EqualTo",
          PACKAGE + "EqualNullSafe",
          PACKAGE + "LessThan",
          PACKAGE + "LessThanOrEqual",
          PACKAGE + "GreaterThan",
          PACKAGE + "GreaterThanOrEqual",
          PACKAGE + "In",
          PACKAGE + "IsNull",
          PACKAGE + "IsNotNull",
          PACKAGE + "CaseWhen",
          PACKAGE + "Cast",
          PACKAGE + "UnaryMinus",
          PACKAGE + "UnaryPositive",
          PACKAGE + "Add",
          PACKAGE + "Subtract",
          PACKAGE + "Multiply",
          PACKAGE + "Divide",
          PACKAGE + "IntegralDivide",
          PACKAGE + "Remainder",
          PACKAGE + "Like",
          PACKAGE + "ILike",
          PACKAGE + "StringTrim",
          PACKAGE + "StringTrimLeft",
          PACKAGE + "StringTrimRight",
          PACKAGE + "Substring");

  /** Functions a filter may call by name (lower case, as Spark's registry spells them). */
  private static final Set<String> FUNCTIONS =
      Set.of(
          "between", "abs", "round", "bround", "pmod", "lower", "lcase", "upper", "ucase",
          "trim", "ltrim", "rtrim", "length", "char_length", "character_length", "substring",
          "substr", "startswith", "endswith", "contains", "coalesce", "nvl", "ifnull", "if",
          "nullif", "isnull", "isnotnull", "to_date", "year", "quarter", "month", "day",
          "dayofmonth",
          "dayofweek", "weekday", "dayofyear", "weekofyear", "hour", "minute", "second");

  /**
   * The analysed classes the executors may run (simple names; {@code With} and
   * {@code CommonExpression*} are how BETWEEN and nullif evaluate a shared operand once).
   */
  private static final Set<String> ANALYSED =
      Set.of(
          "AttributeReference", "BoundReference", "Literal", "GetStructField", "GetArrayItem",
          "GetMapValue", "And", "Or", "Not", "EqualTo", "EqualNullSafe", "LessThan",
          "LessThanOrEqual", "GreaterThan", "GreaterThanOrEqual", "In", "InSet", "IsNull",
          "IsNotNull", "With", "CommonExpressionDef", "CommonExpressionRef", "CaseWhen", "If",
          "Cast", "Coalesce", "Add", "Subtract", "Multiply", "Divide", "IntegralDivide",
          "Remainder", "Pmod", "UnaryMinus", "UnaryPositive", "Abs", "Round", "BRound", "Like",
          "Lower", "Upper", "StringTrim", "StringTrimLeft", "StringTrimRight", "Length",
          "Substring", "StartsWith", "EndsWith", "Contains", "Year", "Quarter", "Month",
          "DayOfMonth", "DayOfWeek", "WeekDay", "DayOfYear", "WeekOfYear", "Hour", "Minute",
          "Second");

  /**
   * Refuses a parsed filter that uses anything but the allowlist, a round scale out of range
   * or a LIKE pattern that is not a string literal; collects each LIKE's pattern and escape
   * character into {@code likes} (the caller refuses patterns that backtrack). Evaluates
   * nothing.
   *
   * @throws Refused naming the first thing refused
   */
  static void checkParsed(Expression e, List<List<String>> likes) {
    String name = e.getClass().getName();
    if (!PARSED.contains(name)) {
      throw refused(e.prettyName(), e.getClass().getSimpleName());
    }
    if (name.equals(ANALYSIS + "UnresolvedFunction")) {
      org.apache.spark.sql.catalyst.analysis.UnresolvedFunction f =
          (org.apache.spark.sql.catalyst.analysis.UnresolvedFunction) e;
      String function = f.nameParts().mkString(".").toLowerCase(Locale.ROOT);
      if (!FUNCTIONS.contains(function) || f.isDistinct() || f.filter().isDefined()) {
        throw refused(function, "function");
      }
      if ((function.equals("round") || function.equals("bround")) && e.children().size() > 1) {
        checkScale(function, e.children().apply(1));
      }
    }
    if (e instanceof org.apache.spark.sql.catalyst.expressions.Like
        || e instanceof org.apache.spark.sql.catalyst.expressions.ILike) {
      Expression pattern = e.children().apply(1);
      if (!(pattern instanceof Literal) || !(pattern.dataType() instanceof StringType)) {
        throw new Refused(
            "the pattern of LIKE/ILIKE must be a string literal, e.g. carrier LIKE 'U%'");
      }
      Object value = ((Literal) pattern).value();
      char escape =
          e instanceof org.apache.spark.sql.catalyst.expressions.Like
              ? ((org.apache.spark.sql.catalyst.expressions.Like) e).escapeChar()
              : ((org.apache.spark.sql.catalyst.expressions.ILike) e).escapeChar();
      likes.add(
          java.util.Arrays.asList(
              value == null ? null : value.toString(), String.valueOf(escape)));
    }
    scala.collection.Iterator<Expression> it = e.children().iterator();
    while (it.hasNext()) {
      checkParsed(it.next(), likes);
    }
  }

  private static void checkScale(String function, Expression scale) {
    Expression literal = scale instanceof UnaryMinus ? ((UnaryMinus) scale).child() : scale;
    if (literal instanceof Literal && literal.dataType() instanceof IntegralType) {
      Object value = ((Literal) literal).value();
      if (value instanceof Number) {
        long n = ((Number) value).longValue();
        if (-MAX_ROUND_SCALE <= n && n <= MAX_ROUND_SCALE) {
          return;
        }
      }
    }
    throw new Refused(
        "the scale of " + function + " must be an integer literal within -" + MAX_ROUND_SCALE
            + " to " + MAX_ROUND_SCALE + " (its cost grows with the scale), e.g. "
            + function + "(dep_delay, 1)");
  }

  /**
   * Refuses an analysed filter whose expressions are not all allowed (what the executors
   * would run). Evaluates nothing.
   *
   * @throws Refused naming the first thing refused
   */
  static void checkAnalysed(Expression e) {
    String name = e.getClass().getName();
    String simple = e.getClass().getSimpleName();
    if (!name.startsWith(PACKAGE) || !ANALYSED.contains(simple)) {
      throw refused(e.prettyName(), simple);
    }
    scala.collection.Iterator<Expression> it = e.children().iterator();
    while (it.hasNext()) {
      checkAnalysed(it.next());
    }
  }

  private static Refused refused(String what, String kind) {
    return new Refused(what + " (" + kind + ") is not allowed in a filter: " + RULE);
  }
}
