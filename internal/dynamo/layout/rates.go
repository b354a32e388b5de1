package layout

import "strconv"

// A rate key's bucket rows (shared/pace, pace.Rows.LeaseRate): one per
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

// A token key's row (docs/adr/0035, pace.Rows.LeaseTokens and
// SettleTokens): one per key, TOKENS#{key}, sk TOKENS, no shards;
// attributes next_us (the row's Next, epoch microseconds, as a bucket
// row's; absent until a lease or a debt moves it), tok_used (the tokens
// settled so far, a number) and tok_calls (the calls they were reported
// by, an integer) and drift_us (the sum of the settles' deltas that
// moved next_us, microseconds), one conditional update per lease, one
// update per settle (ADD tok_used, tok_calls, drift_us) and one strongly
// consistent read per booking carried ahead, the row TTL renewed by each
// write. Like
// the bucket rows they belong to the key, not to a batch: deleting a
// batch leaves them to their TTL.
const (
	PKTokens     = "TOKENS#"
	SKTokens     = "TOKENS"
	AttrTokUsed  = "tok_used"
	AttrTokCalls = "tok_calls"
	AttrDriftUs  = "drift_us"
)

// TokensPK is the partition key of token key key's row.
func TokensPK(key string) string { return PKTokens + key }

// A downstream key's adaptive row (docs/adr/0036, pace.Rows.ReadAdapt,
// CutAdapt and LeaseAdapt; shared/pace Adapt): one per key, ADAPT#{key},
// sk ADAPT; attributes ad_limit (requests a second, a number), ad_step
// (its growth a second), ad_slow (1: in slow start), ad_thresh (where slow
// start ends, requests a second; absent: at pace.AdaptCeiling), ad_base (the
// allowance at the cut, calls), ad_cut_us and ad_hold_us (epoch
// microseconds; absent: none), ad_resumed (1: the last cut was a
// resume's restart, not a throttled answer; absent: a throttled answer),
// written by a throttled call's cut (at most
// about once a second with the limit changed) or a resume, and ad_booked (the
// positions leased, calls), one conditional update per lease; read at
// most once a second by each item function process calling the key. Its
// TTL is renewed by each write. Like the bucket rows it belongs to the
// key, not to a batch.
const (
	PKAdapt       = "ADAPT#"
	SKAdapt       = "ADAPT"
	AttrAdLimit   = "ad_limit"
	AttrAdStep    = "ad_step"
	AttrAdSlow    = "ad_slow"
	AttrAdThresh  = "ad_thresh"
	AttrAdBase    = "ad_base"
	AttrAdCutUs   = "ad_cut_us"
	AttrAdHoldUs  = "ad_hold_us"
	AttrAdBooked  = "ad_booked"
	AttrAdResumed = "ad_resumed"
)

// AdaptPK is the partition key of downstream key key's adaptive row.
func AdaptPK(key string) string { return PKAdapt + key }
