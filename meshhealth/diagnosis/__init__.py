"""Suspicion per path, local health awareness and findings over the matrix (pure, no I/O).

- `suspicion`: ok -> suspect -> unreachable per path, with a suspicion time that shrinks
  with independent confirmations (Lifeguard's formula);
- `local_health`: how unwell this agent is (loop lag, own targets failing, etcd), the
  factor that stretches its timeouts, and whether its reports count as degraded;
- `view`, `diagnose`, `findings`: the matrix as diagnosis reads it (one `MatrixView`,
  built from the matrix document), the rules that turn it into findings (node-down,
  partition, ...), and their JSON.

docs/diagnosis.md explains the states, the formula and every finding kind.
"""
