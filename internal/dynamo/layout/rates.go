package layout

import "strconv"

// A rate key's bucket rows (shared/pace, ledger.Store.LeaseRate): one per
// shard, RATE#{key}#{shard}, sk RATE, attribute next_us (the row's Next,
// epoch microseconds), one conditional update per lease, the row TTL
// renewed by each. A key is [A-Za-z0-9._:/@-] (api.Rate), so no key
// reaches into another's rows. They belong to the key, not to a batch:
// deleting a batch leaves them to their TTL.
const (
	PKRate     = "RATE#"
	SKRate     = "RATE"
	AttrNextUs = "next_us"
)

// RatePK is the partition key of shard shard of rate key key.
func RatePK(key string, shard int) string { return PKRate + key + "#" + strconv.Itoa(shard) }
