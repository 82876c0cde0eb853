"""What every graph backend shares: the graph model, its queries written once in the
Cypher that FalkorDB, Neo4j and Memgraph have in common, and the `Store` primitives over
them. What differs between servers is a `CypherDialect` (index DDL, the full-text and
vector procedures, how a transaction is expressed); ``dialect`` also notes what Neo4j
5.13+ and Memgraph would need.

- `dialect`: `CypherDialect` and FalkorDB's dialect.
- `queries`: the graph model and every query, as named constants with parameters.
- `values`: values to parameters, rows back to values.
- `store`: `CypherBackend`, whose subclass gives a dialect and a way to run a query.
"""
