// Package source reads the items of a source and writes them into a
// manifest: JSON Lines, a JSON array and CSV (RFC 4180, its delimiter
// detected) as UTF-8, plain or gzip (ReadJSONL, ReadJSONArray, ReadCSV,
// SourceText), an S3 object or every object under a prefix (ReadSource,
// ListPrefix, over the narrow Objects port), and the normalized JSON Lines
// manifest with its digest and fan-out chunks (ManifestWriter,
// ReadManifestLines, Chunk). It also holds the source policy, which
// buckets and prefixes a batch may read (SourcePolicy).
//
// Bad input is an *api.InputError naming the line, element, key or field,
// whatever the size of the source; memory is bounded (duplicate keys are
// found by internal/keyset, spilling to disk).
//
// It imports no engine and no AWS SDK: the submit engine reads with it,
// and so does the command line, which checks a local file and computes
// its digest (bulkrun upload) exactly as submit would.
package source
