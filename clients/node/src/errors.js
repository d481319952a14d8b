// Errors of the dlock client: LeaseLost, StaleToken, NotAcquired.

/** Base class of the errors this library raises itself. */
export class DlockError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * The lease was lost: a renew returned false (`renewed-false`), the local
 * deadline passed without a successful renew (`deadline`), the body did not
 * report progress in time (`no-progress`), or the final release returned
 * false (`released-false`). Work done under it is not a success.
 */
export class LeaseLost extends DlockError {
  /**
   * @param {'renewed-false'|'deadline'|'no-progress'|'released-false'} reason
   * @param {string[]} names
   * @param {bigint[]} tokens
   */
  constructor(reason, names, tokens) {
    const what = names.length === 1 ? `lease "${names[0]}" (token ${tokens[0]})` : `lease set ${names.map((n) => `"${n}"`).join(', ')}`;
    const why = {
      'renewed-false': 'a renew returned false: it was broken, or it expired and was taken over',
      deadline: 'its deadline passed without a successful renew',
      'no-progress': 'the body did not report progress within progressTimeout',
      'released-false': 'the release returned false: it had expired or been taken over',
    }[reason];
    super(`${what} lost: ${why}`);
    /** @type {string} */
    this.reason = reason;
    this.names = names;
    this.tokens = tokens;
  }
}

/**
 * A fenced write or check was rejected (SQLSTATE 55T01): the token is no
 * longer current. Do not retry the same write: acquire again, re-read, redo
 * the work.
 */
export class StaleToken extends DlockError {
  constructor(cause) {
    const detail = cause && cause.detail ? ` (${cause.detail})` : '';
    super(`fencing token rejected${detail}: do not retry the same write; acquire the lease again, re-read and redo the work`, { cause });
    this.code = '55T01';
    this.detail = cause && cause.detail;
  }
}

/** The acquire returned no lease within `wait`. */
export class NotAcquired extends DlockError {
  constructor(names, wait) {
    const what = names.length === 1 ? `"${names[0]}"` : names.map((n) => `"${n}"`).join(', ');
    super(`${what}: not acquired within ${wait} s (held by another holder)`);
    this.names = names;
    this.wait = wait;
  }
}

/** An attempt that got no answer within its time and was abandoned. */
export class NoAnswer extends DlockError {
  constructor(what, ms) {
    super(`${what}: no answer within ${Math.round(ms)} ms (connection closed)`);
    this.code = undefined;
  }
}

/** Maps 55T01 to StaleToken, leaves everything else as it is. */
export function mapStale(err) {
  if (err && err.code === '55T01' && !(err instanceof StaleToken)) return new StaleToken(err);
  return err;
}
