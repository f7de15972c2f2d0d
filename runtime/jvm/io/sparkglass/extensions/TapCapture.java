package io.sparkglass.extensions;

import io.sparkglass.sampling.CaseClassExpression;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Pattern;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionEquals;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprValue;
import org.apache.spark.sql.catalyst.expressions.codegen.FalseLiteral$;
import org.apache.spark.sql.catalyst.expressions.codegen.GlobalValue;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.catalyst.expressions.codegen.LiteralValue;
import org.apache.spark.sql.catalyst.expressions.codegen.SubExprEliminationState;
import org.apache.spark.sql.catalyst.expressions.codegen.VariableValue;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import scala.Option;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;

/**
 * A tap's capture ({@code sg_capture_N(struct(...))}, the {@code CaptureUdf} behind a
 * {@code ScalaUDF}) with its generated code moved out of the caller's method.
 *
 * <p>Whole-stage code generation writes every operator of a stage into one method, and a
 * filter's condition is inlined there whole. The capture branch (the struct, the UDF's
 * converters and call) is a few hundred bytes of bytecode per tap; with some twenty taps in a
 * stage the method passes HotSpot's 8,000-byte limit for JIT compilation and the whole stage
 * runs interpreted, although the branch only runs for the rows a gate admits. So the child's
 * code goes into a method of its own in the generated class, fed as parameters the local
 * variables it reads (as Spark's {@code HashAggregateExec} splits its aggregate functions),
 * and only the call stays inline. When the split cannot be written safely (an input that is
 * not a plain local variable, one not evaluated yet, too many parameters) the child's code is
 * inlined as it always was.
 *
 * <p>Otherwise transparent: it prints and renders as SQL as its child does, and is
 * nondeterministic like it (never folded, reordered or deduplicated). Its value is the
 * child's with null read as false, as a filter reads it: never null, which spares the caller's
 * method the null bookkeeping of a nullable result. Written as {@link NativeTapGate} is, for
 * the same reasons: child handling by hand, case-class members from {@link CaseClassExpression}.
 */
public final class TapCapture extends CaseClassExpression {
  private static final long serialVersionUID = 1L;
  private static final Pattern JAVA_NAME = Pattern.compile("[A-Za-z_$][A-Za-z0-9_$]*");

  private final Expression capture;
  private final Seq<Expression> children;

  public TapCapture(Expression capture) {
    if (capture == null) {
      throw new IllegalArgumentException("TapCapture: the capture is null");
    }
    if (capture.resolved() && !DataTypes.BooleanType.equals(capture.dataType())) {
      throw new IllegalArgumentException("TapCapture: the capture is not boolean");
    }
    this.capture = capture;
    this.children = TapFunctions.seq(Collections.singletonList(capture));
  }

  public Expression capture() {
    return capture;
  }

  @Override
  public boolean nullable() {
    return false;
  }

  @Override
  public DataType dataType() {
    return DataTypes.BooleanType;
  }

  @Override
  public boolean deterministic() {
    return false;
  }

  @Override
  public boolean foldable() {
    return false;
  }

  @Override
  public Object eval(InternalRow input) {
    return Boolean.TRUE.equals(capture.eval(input));
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    ExprCode split = splitGenCode(ctx, ev);
    if (split != null) {
      return split;
    }
    ExprCode inline = capture.genCode(ctx);
    String code = inline.code() + "\nboolean " + ev.value() + " = !" + inline.isNull() + " && "
        + inline.value() + ";";
    return ev.copy(block(code), FalseLiteral$.MODULE$, ev.value());
  }

  private static CodeBlock block(String code) {
    return new CodeBlock(TapFunctions.seq(Collections.singletonList(code)),
        TapFunctions.seq(Collections.<JavaCode>emptyList()));
  }

  /** The capture as a call to a method of its own, or null when that cannot be written. */
  private ExprCode splitGenCode(CodegenContext ctx, ExprCode ev) {
    Map<String, VariableValue> params = new TreeMap<>();
    if (!collectInputs(ctx, capture, params)) {
      return null;
    }
    String inputRow = ctx.INPUT_ROW();
    if (inputRow != null) {
      // As Spark's own splits: a bound reference without a current variable reads the row.
      if (!JAVA_NAME.matcher(inputRow).matches()) {
        return null;
      }
      params.putIfAbsent(inputRow, JavaCode.variable(inputRow, InternalRow.class));
    }
    int length = CodeGenerator.calculateParamLengthFromExprValues(
        TapFunctions.seq(new ArrayList<ExprValue>(params.values())));
    if (!CodeGenerator.isValidParamLength(length)) {
      return null;
    }
    StringBuilder declared = new StringBuilder();
    StringBuilder passed = new StringBuilder();
    for (VariableValue p : params.values()) {
      if (declared.length() > 0) {
        declared.append(", ");
        passed.append(", ");
      }
      declared.append(CodeGenerator.typeName(p.javaType())).append(' ').append(p.variableName());
      passed.append(p.variableName());
    }
    ExprCode body = capture.genCode(ctx);
    String name = ctx.freshName("sgCapture");
    String function = ctx.addNewFunction(name,
        "private boolean " + name + "(" + declared + ") {\n"
            + body.code() + "\n"
            + "return !" + body.isNull() + " && " + body.value() + ";\n"
            + "}\n",
        false);
    String code = "boolean " + ev.value() + " = " + function + "(" + passed + ");";
    return ev.copy(block(code), FalseLiteral$.MODULE$, ev.value());
  }

  /**
   * Adds to {@code params} the local variables {@code e}'s code reads from the caller's
   * method: those of the current input variables and of common subexpressions it refers to.
   * False when one cannot be passed: an input not evaluated yet (its code would move into the
   * new method, out of the caller's reach) or one that is an expression over other locals.
   */
  private static boolean collectInputs(CodegenContext ctx, Expression e,
      Map<String, VariableValue> params) {
    Option<SubExprEliminationState> common =
        ctx.subExprEliminationExprs().get(ExpressionEquals.apply(e));
    if (common.isDefined()) {
      ExprCode state = common.get().eval();
      return passable(state.value(), params) && passable(state.isNull(), params);
    }
    Seq<ExprCode> current = ctx.currentVars();
    if (e instanceof BoundReference && current != null) {
      int ordinal = ((BoundReference) e).ordinal();
      ExprCode input = ordinal < current.size() ? current.apply(ordinal) : null;
      if (input != null) {
        return input.code().toString().trim().isEmpty()
            && passable(input.value(), params) && passable(input.isNull(), params);
      }
    }
    for (Expression child : scala.jdk.javaapi.CollectionConverters.asJava(e.children())) {
      if (!collectInputs(ctx, child, params)) {
        return false;
      }
    }
    return true;
  }

  private static boolean passable(ExprValue v, Map<String, VariableValue> params) {
    if (v instanceof VariableValue) {
      VariableValue local = (VariableValue) v;
      if (!JAVA_NAME.matcher(local.variableName()).matches()) {
        return false;
      }
      params.putIfAbsent(local.variableName(), local);
      return true;
    }
    // Fields of the generated class and literals read the same from any of its methods.
    return v instanceof GlobalValue || v instanceof LiteralValue;
  }

  @Override
  public String prettyName() {
    return capture.prettyName();
  }

  @Override
  public String sql() {
    return capture.sql();
  }

  @Override
  public String toString() {
    return capture.toString();
  }

  // The case-class members.

  @Override
  protected Object[] caseFields() {
    return new Object[] {capture};
  }

  @Override
  public Seq<Expression> children() {
    return children;
  }

  @Override
  public Expression withNewChildrenInternal(IndexedSeq<Expression> newChildren) {
    return new TapCapture(newChildren.apply(0));
  }
}
