package io.sparkglass.extensions;

import io.sparkglass.sampling.TapSlot;
import io.sparkglass.sampling.CaseClassExpression;
import java.util.Collections;
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

/**
 * {@code sg_tap_gate_native('key')}: the tap's gate as a Catalyst expression with its own
 * code generation, instead of a {@link io.sparkglass.sampling.GateUdf} behind a
 * {@code ScalaUDF}. In whole-stage generated code an idle tap costs one read of the public
 * volatile field {@link TapSlot#active} of a slot held in a field of the generated class; the
 * slow path (the task's {@link TapSlot.Cursor#admit()}, which does what the UDF's
 * {@link TapSlot#admit()} does without looking the task and its sampler up per row) runs only
 * while a round is active. The capture stays the {@code CaptureUdf}: it only runs for admitted rows.
 *
 * <p>Written in Java against Catalyst's Scala classes. It extends {@code Expression}, not
 * {@code LeafExpression}: javac rejects a Java subclass of {@code LeafExpression} (the final
 * {@code mapChildren} it inherits from the Scala trait {@code LeafLike} returns the erased
 * {@code TreeNode}, which javac does not accept as implementing the trait's generic
 * {@code T mapChildren(...)}), so the leaf's members ({@code children}, {@code
 * withNewChildrenInternal}) are written here; the case-class members come from {@link
 * CaseClassExpression}. Nondeterministic (never folded, reordered or deduplicated by the
 * optimizer), like the UDF it replaces.
 */
public final class NativeTapGate extends CaseClassExpression {
  private static final long serialVersionUID = 1L;
  /** The function name injected by {@link SamplingExtensions}. */
  public static final String NAME = "sg_tap_gate_native";

  private static final Seq<Expression> NO_CHILDREN =
      TapFunctions.seq(Collections.<Expression>emptyList());

  private final String tapKey;
  private transient TapSlot slot;

  public NativeTapGate(String tapKey) {
    if (tapKey == null) {
      throw new IllegalArgumentException(NAME + ": the tap key is null");
    }
    this.tapKey = tapKey;
  }

  public String tapKey() {
    return tapKey;
  }

  private TapSlot slot() {
    TapSlot s = slot;
    if (s == null) {
      s = TapSlot.forKey(tapKey);
      slot = s;
    }
    return s;
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
    try {
      return slot().gate();
    } catch (Throwable e) {
      io.sparkglass.sampling.TapErrors.record(e);
      return Boolean.FALSE;
    }
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    String cls = TapSlot.class.getName();
    String ref = ctx.addReferenceObj("sgTapSlot", TapSlot.forKey(tapKey), cls);
    // A field of the generated class, set once when it is initialised: per row, the idle
    // path reads this field and the slot's volatile flag, nothing else.
    String field = ctx.addMutableState(cls, "sgTapSlot", v -> v + " = " + ref + ";", true, true);
    // The task's cursor, made where the generated class is set up (the task's thread): an
    // active tap's rows skip the task-context and sampler lookups.
    String cursorCls = TapSlot.Cursor.class.getName().replace('$', '.');
    String cursor = ctx.addMutableState(cursorCls, "sgTapCursor",
        v -> v + " = ((" + cls + ") " + ref + ").cursor();", true, true);
    String value = ev.value().toString();
    String code = "boolean " + value + " = " + field + ".active && " + cursor + ".admit();";
    return ev.copy(
        new CodeBlock(TapFunctions.seq(Collections.singletonList(code)),
            TapFunctions.seq(Collections.<JavaCode>emptyList())),
        FalseLiteral$.MODULE$, ev.value());
  }

  @Override
  public String prettyName() {
    return NAME;
  }

  @Override
  public String sql() {
    return NAME + "('" + tapKey.replace("\\", "\\\\").replace("'", "\\'") + "')";
  }

  @Override
  public String toString() {
    return NAME + "(" + tapKey + ")";
  }

  // The case-class members.

  @Override
  protected Object[] caseFields() {
    return new Object[] {tapKey};
  }

  @Override
  public Seq<Expression> children() {
    return NO_CHILDREN;
  }

  @Override
  public Expression withNewChildrenInternal(IndexedSeq<Expression> newChildren) {
    return this; // a leaf: no children to replace
  }
}
