package io.sparkglass.sampling;

import java.io.Serializable;
import java.util.Arrays;
import org.apache.spark.sql.catalyst.expressions.Expression;

/**
 * A Catalyst expression written in Java: the case-class members Scala would generate for it.
 *
 * <p>Catalyst compares, hashes and copies expressions as Scala case classes. A Java subclass
 * of {@code Expression} gets none of that, so {@code productArity}, {@code productElement},
 * {@code canEqual}, {@code equals} and {@code hashCode} are derived here from {@link
 * #caseFields()}, the constructor's arguments in order (Catalyst's reflective {@code makeCopy}
 * calls the constructor with them). Two expressions are equal when they are of the same
 * class and their fields are equal ({@code equals} of each field: an object without its own,
 * such as a counter shared by the tasks of one plan, is compared by identity). {@code
 * Serializable} too: without it interpreted mode fails with "Task not serializable".
 */
public abstract class CaseClassExpression extends Expression implements Serializable {
  private static final long serialVersionUID = 1L;

  /** The constructor's arguments, in order: what makes two instances equal. */
  protected abstract Object[] caseFields();

  @Override
  public final int productArity() {
    return caseFields().length;
  }

  @Override
  public final Object productElement(int n) {
    Object[] fields = caseFields();
    if (n < 0 || n >= fields.length) {
      throw new IndexOutOfBoundsException(String.valueOf(n));
    }
    return fields[n];
  }

  @Override
  public final boolean canEqual(Object that) {
    return that != null && that.getClass() == getClass();
  }

  @Override
  public final boolean equals(Object o) {
    return o != null
        && o.getClass() == getClass()
        && Arrays.equals(((CaseClassExpression) o).caseFields(), caseFields());
  }

  @Override
  public final int hashCode() {
    return getClass().hashCode() * 31 + Arrays.hashCode(caseFields());
  }
}
