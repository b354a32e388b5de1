// Package secretref holds the rules of secret references in a batch's
// headers and pipeline options ("secret:arn:aws:ssm:…", "secret:arn:aws:
// secretsmanager:…", or {"secret": "arn:…"} in the options): how one is
// recognised (Parse, Refs), which the stack allows (Check, Allowed, by its
// SecretPrefixes), and how every value bulkrun shows of a batch is
// redacted (Redacted, RedactHeaders, RedactOptions, Digest). It resolves
// nothing: the item function does, through internal/secret. Pure: the
// standard library and shared/api only.
package secretref
