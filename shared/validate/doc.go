// Package validate checks a batch's items before any of them runs: the
// JSON Schema a batch may carry (Compile, Schema.Check), the types a
// schema gives CSV columns (Schema.Cell), and the record of every
// problem found while the source is read (Problem, Report).
//
// A schema is JSON Schema draft 2020-12 (https://json-schema.org/draft/2020-12,
// "JSON Schema: A Media Type for Describing JSON Documents" and
// "JSON Schema Validation"; a "$schema" naming draft 4, 6, 7 or 2019-09 is
// read as that draft), compiled once per read with
// github.com/santhosh-tekuri/jsonschema/v6 (docs/adr/0029). Three limits
// keep a schema from costing more than the items it checks:
//
//   - no remote "$ref": a reference outside the schema itself (http, https,
//     file or any other URL) is refused at Compile, never fetched; the
//     draft meta-schemas are built in;
//   - "pattern" and "patternProperties" are compiled by Go's regexp
//     (RE2: matching is linear in the text, no backtracking), each at most
//     MaxPatternBytes; a pattern RE2 cannot compile (a look-ahead, a
//     back-reference) refuses the schema naming it;
//   - the schema itself is at most MaxSchemaBytes.
//
// "format" is an annotation, as draft 2020-12 has it by default: "email"
// or "date-time" are not asserted.
//
// The package holds no state between calls and imports only shared/api:
// shared/source reads with it, the submit engine and the command line
// through shared/source.
package validate
