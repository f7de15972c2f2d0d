package io.sparkglass.quality;

import io.sparkglass.sampling.CaseClassExpression;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.FalseLiteral$;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * {@code sg_expect_count(pass_1, ..., pass_n)}: always true; counts into an
 * {@link ExpectationTally} every row it sees and, per expectation {@code i}, the rows whose
 * {@code pass_i} is not true (false or NULL). As the condition of a {@code Filter} it keeps
 * every row and, unlike Spark's {@code observe} ({@code CollectMetrics}, which ends the
 * whole-stage generated code and updates its aggregates row by row), stays inside the
 * stage's generated code: per row it costs its conditions and {@code 1 + failures} array
 * increments.
 *
 * <p>Nondeterministic, so the optimizer neither folds it, nor merges the {@code Filter} with
 * the ones above it, nor pushes those below it ({@code expect_or_drop}'s filters come after the
 * count). Written in Java against Catalyst's Scala classes, as {@code
 * io.sparkglass.extensions.NativeTapGate} is (see there and {@link CaseClassExpression}).
 */
public final class ExpectationCounter extends CaseClassExpression {
  private static final long serialVersionUID = 1L;

  private final Seq<Expression> conditions;
  private final ExpectationTally tally;

  /** Counts {@code conditions} (boolean expressions, one per expectation) into {@code tally}. */
  public ExpectationCounter(Seq<Expression> conditions, ExpectationTally tally) {
    if (conditions == null || tally == null) {
      throw new IllegalArgumentException("ExpectationCounter: conditions and tally are required");
    }
    if (conditions.size() != tally.expectations()) {
      throw new IllegalArgumentException("ExpectationCounter: " + conditions.size()
          + " conditions for a tally of " + tally.expectations() + " expectations");
    }
    this.conditions = conditions;
    this.tally = tally;
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
    long[] counts = tally.countsFor(ExpectationTally.INTERPRETED);
    counts[0]++;
    int i = 1;
    for (Expression c : CollectionConverters.asJava(conditions)) {
      Object pass = c.eval(input);
      if (!Boolean.TRUE.equals(pass)) {
        counts[i]++;
      }
      i++;
    }
    return Boolean.TRUE;
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    String ref = ctx.addReferenceObj("sgTally", tally, ExpectationTally.class.getName());
    // This place in the plan gets its own number, so that a vertex read on two paths (or by
    // two jobs of a micro-batch) is not counted twice.
    int occurrence = tally.nextOccurrence();
    // The task's counts array, in a field of the generated class set once at its set-up (in
    // the task's thread, so the tally learns its micro-batch there): per row, increments only.
    String counts = ctx.addMutableState("long[]", "sgExpectCounts",
        v -> v + " = " + ref + ".countsFor(" + occurrence + ");", true, true);
    StringBuilder code = new StringBuilder();
    code.append(counts).append("[0]++;\n");
    int i = 1;
    for (Expression c : CollectionConverters.asJava(conditions)) {
      ExprCode pass = c.genCode(ctx);
      code.append(pass.code().toString()).append('\n');
      code.append("if (").append(pass.isNull()).append(" || !").append(pass.value())
          .append(") ").append(counts).append('[').append(i).append("]++;\n");
      i++;
    }
    code.append("boolean ").append(ev.value()).append(" = true;");
    List<String> parts = new ArrayList<>();
    parts.add(code.toString());
    return ev.copy(
        new CodeBlock(CollectionConverters.asScala(parts).toSeq(),
            CollectionConverters.asScala(new ArrayList<JavaCode>()).toSeq()),
        FalseLiteral$.MODULE$, ev.value());
  }

  @Override
  public String prettyName() {
    return "sg_expect_count";
  }

  @Override
  public String toString() {
    return "sg_expect_count(" + conditions.mkString(", ") + ")";
  }

  // The case-class members.

  @Override
  protected Object[] caseFields() {
    return new Object[] {conditions, tally};
  }

  @Override
  public Seq<Expression> children() {
    return conditions;
  }

  @Override
  public Expression withNewChildrenInternal(IndexedSeq<Expression> newChildren) {
    return new ExpectationCounter(newChildren, tally);
  }
}
