-- One acquire+release of dlock in one statement (one transaction, which
-- changes the name's lease twice and wakes its waiters once, at commit), on
-- a random name PREFIX1 .. PREFIXNAMES.  Variables: prefix (a string, e.g.
-- p:), names.
\set id random(1, :names)
SELECT dlock_release(:prefix::text || :id, dlock_acquire(:prefix::text || :id, '30 s'));
