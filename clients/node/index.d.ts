// Type declarations of the dlock package (ESM). Checked by the suite
// (test/types.test.js runs tsc --noEmit on test/types/usage.ts).

/** The part of a pg.Pool this library uses (any node-postgres Pool fits). */
export interface PoolLike {
  connect(): Promise<PoolClientLike>;
  query(text: string, values?: unknown[]): Promise<QueryResultLike>;
  readonly totalCount: number;
  options?: Record<string, unknown>;
}

/** The part of a pg.Client / PoolClient this library uses. */
export interface ClientLike {
  query(text: string, values?: unknown[]): Promise<QueryResultLike>;
}

export interface PoolClientLike extends ClientLike {
  release(err?: Error | boolean): void;
}

export interface QueryResultLike {
  rows: any[];
  rowCount: number | null;
  command: string;
}

/** Where acquires and releases run: a Dlock client, a pg.Pool, or a connection string. */
export type Source = Dlock | PoolLike | string;

/** The modes of dlock_check. */
export type FenceMode = 'latest' | 'live' | 'seen';

/** Why a lease was lost. */
export type LostReason = 'renewed-false' | 'deadline' | 'no-progress' | 'released-false';

/** What a scope reports through `onRelease` when it ends. */
export interface ReleaseReport {
  /** true when the release returned true. */
  confirmed: boolean;
  /** The LeaseLost error when the lease was lost, else null. */
  lost: LeaseLost | null;
  lease: Lease;
}

export interface LeaseOptions {
  /** Lease time in seconds (the lease is renewed every ttl/3). */
  ttl: number;
  /** Seconds to wait for a held lease (default 0); NotAcquired after it. */
  wait?: number;
  /** Owner label shown in dlock_leases (default: the client's, else the session's). */
  owner?: string;
  /** Seconds within which the body must call `lease.progress()`; the lease is lost otherwise. */
  progressTimeout?: number;
  /** Cancels a waiting acquire, and the scope: the lease's signal aborts with its reason. */
  signal?: AbortSignal;
  /** Scopes only: called when the scope ends, with whether the release was confirmed. */
  onRelease?: (report: ReleaseReport) => void;
}

export interface PermitOptions extends LeaseOptions {
  /** N: the permits are `base:1` … `base:N`. */
  permits: number;
}

export interface DlockOptions {
  /** Connection string of the renewal connection (default: the pool's options or the source's conninfo). */
  renewalConninfo?: string;
  /** Default owner label of this client's leases. */
  owner?: string;
}

/** A held lease: one name, a set of names, or a permit. */
export declare class Lease {
  private constructor();
  /** The (first) lock name. */
  readonly name: string;
  /** The (first) fencing token. */
  readonly token: bigint;
  /** Every name (one for a lease or a permit). */
  readonly names: string[];
  /** Every token, in the order of `names`. */
  readonly tokens: bigint[];
  /** A permit's slot number (1 … permits); undefined otherwise. */
  readonly slot: number | undefined;
  /** The ttl in seconds. */
  readonly ttl: number;
  /** The server's expiry after the last grant or renew. */
  readonly expiresAt: Date;
  /** The local deadline in performance.now() milliseconds. */
  readonly deadline: number;
  /** Successful renewals so far. */
  readonly renewals: number;
  /** The last failed renewal's error (null after a success). */
  readonly lastError: unknown;
  /** After the release: true when confirmed, false when not; null before. */
  readonly confirmed: boolean | null;
  /** The LeaseLost error once lost, else null. */
  readonly lostError: LeaseLost | null;
  /** Aborts when the lease is lost (reason: the LeaseLost) or the scope is cancelled. */
  readonly signal: AbortSignal;
  /** True once lost (reads the clock first). */
  readonly lost: boolean;
  /** Throws the LeaseLost when lost. */
  check(): void;
  /** Reports progress (see progressTimeout); throws LeaseLost when lost. */
  progress(): void;
  /** Runs fn in a transaction that first checks this lease's token(s) with dlock_check. */
  fenced<T>(client: ClientLike | PoolLike, fn: (client: any) => Promise<T> | T, opts?: { mode?: FenceMode }): Promise<T>;
  /** Stops renewal and releases; rejects with LeaseLost when the lease was lost. */
  release(): Promise<{ confirmed: boolean }>;
}

/** A dlock client: one renewal connection for all its leases. */
export declare class Dlock {
  constructor(source: PoolLike | string, options?: DlockOptions);
  /** The backend pid of the renewal connection, null while none is open. */
  readonly renewalPid: number | null;
  owner: string | undefined;
  acquire(name: string, opts: LeaseOptions): Promise<Lease>;
  acquireAll(names: string[], opts: LeaseOptions): Promise<Lease>;
  acquirePermit(base: string, opts: PermitOptions): Promise<Lease>;
  withLease<T>(name: string, opts: LeaseOptions, fn: (lease: Lease) => Promise<T> | T): Promise<T>;
  withLeases<T>(names: string[], opts: LeaseOptions, fn: (lease: Lease) => Promise<T> | T): Promise<T>;
  withPermit<T>(base: string, opts: PermitOptions, fn: (lease: Lease) => Promise<T> | T): Promise<T>;
  /** Closes idle connections (held leases are not released). */
  close(): void;
}

/** The one Dlock client kept per pg.Pool or connection string (or `source` itself). */
export declare function clientFor(source: Source): Dlock;

export declare function withLease<T>(source: Source, name: string, opts: LeaseOptions, fn: (lease: Lease) => Promise<T> | T): Promise<T>;
export declare function withLeases<T>(source: Source, names: string[], opts: LeaseOptions, fn: (lease: Lease) => Promise<T> | T): Promise<T>;
export declare function withPermit<T>(source: Source, base: string, opts: PermitOptions, fn: (lease: Lease) => Promise<T> | T): Promise<T>;
export declare function acquire(source: Source, name: string, opts: LeaseOptions): Promise<Lease>;
export declare function acquireAll(source: Source, names: string[], opts: LeaseOptions): Promise<Lease>;
export declare function acquirePermit(source: Source, base: string, opts: PermitOptions): Promise<Lease>;

/** `lease.fenced(client, fn, opts)`. */
export declare function fenced<T>(client: ClientLike | PoolLike, lease: Lease, fn: (client: any) => Promise<T> | T, opts?: { mode?: FenceMode }): Promise<T>;

/** A fenced transaction with given (name, token) pairs, whatever this process holds. */
export declare function fencedTransaction<T>(
  client: ClientLike | PoolLike,
  pairs: { name: string; token: bigint | string | number }[],
  fn: (client: any) => Promise<T> | T,
  opts?: { mode?: FenceMode },
): Promise<T>;

/** The current leader of an election. */
export interface Leader {
  name: string;
  owner: string;
  token: bigint;
  expiresAt: Date;
}

export declare class Observer implements AsyncIterableIterator<Leader> {
  private constructor();
  /** 'listen' (following NOTIFY events) or 'poll' once started; null before. */
  readonly mode: 'listen' | 'poll' | null;
  next(): Promise<IteratorResult<Leader>>;
  return(): Promise<IteratorResult<Leader>>;
  [Symbol.asyncIterator](): Observer;
  close(): void;
}

export declare class Election {
  constructor(source: Source, name: string, opts: { ttl: number; owner?: string; progressTimeout?: number });
  readonly name: string;
  readonly ttl: number;
  /** The lease while this candidate leads (after campaign). */
  readonly lease: Lease | null;
  campaign(opts?: { signal?: AbortSignal; wait?: number }): Promise<Lease>;
  resign(): Promise<{ confirmed: boolean }>;
  leader(): Promise<Leader | null>;
  observe(opts?: { signal?: AbortSignal; listen?: boolean; pollInterval?: number }): Observer;
}

export declare class DlockError extends Error {}

export declare class LeaseLost extends DlockError {
  readonly reason: LostReason;
  readonly names: string[];
  readonly tokens: bigint[];
}

export declare class StaleToken extends DlockError {
  readonly code: '55T01';
  readonly detail: string | undefined;
}

export declare class NotAcquired extends DlockError {
  readonly names: string[];
  readonly wait: number;
}

export declare class NoAnswer extends DlockError {}

/** A parsed connection string. */
export interface ConnConfig {
  hosts: { host: string; port: number }[];
  user?: string;
  password?: string;
  database?: string;
  applicationName?: string;
  options?: string;
  connectTimeout?: number;
  targetSessionAttrs: 'any' | 'read-write' | 'read-only' | 'primary' | 'standby' | 'prefer-standby';
  ssl?: unknown;
}

export declare function parseConninfo(conninfo: string): ConnConfig;

/** Opens a pg.Client through several hosts and target_session_attrs. */
export declare function connect(conninfo: string | ConnConfig, opts?: { budgetMs?: number; applicationName?: string }): Promise<any>;
