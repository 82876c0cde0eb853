"""What every graph backend shares: the graph model, its queries written once in the
Cypher that FalkorDB, Neo4j and Memgraph have in common, and the `Store` primitives over
them. What differs between servers is a `CypherDialect` (index DDL, the full-text and
vector procedures, how a transaction is expressed); ``dialect`` also notes what Neo4j
5.13+ and Memgraph would need.

- `dialect`: `CypherDialect` and FalkorDB's dialect.
- `queries`: the graph model and every query, as named constants with parameters.
- `values`: values to parameters, rows back to values.
- `schema`: the schema's record, its migrations applied, the metadata index's keys.
- `url`: what every graph backend's URL takes alike.
- `store`: `CypherBackend` (lifecycle, schema and every primitive), whose subclass gives
  a dialect, its migrations, and the few methods that speak to its server.
"""
