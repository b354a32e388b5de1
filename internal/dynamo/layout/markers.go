package layout

import (
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// PublishMarkerFrom reads a PUBLISH marker's sort key "{batch id}#{run:010}";
// false when it is not one.
func PublishMarkerFrom(sk string) (ledger.RunRef, bool) {
	id, digits, ok := strings.Cut(sk, "#")
	run, err := strconv.Atoi(digits)
	if !ok || err != nil || run < 1 {
		return ledger.RunRef{}, false
	}
	return ledger.RunRef{BatchID: id, Run: run}, true
}

// RetentionMarkerFrom reads a retention marker row (RETENTION,
// "{expiry ms:020}#{batch id}"): Malformed when its sort key is not that.
func RetentionMarkerFrom(av map[string]types.AttributeValue) ledger.RetentionMarker {
	sk, _ := av[config.AttrSK].(*types.AttributeValueMemberS)
	m := ledger.RetentionMarker{Malformed: true}
	if sk != nil {
		m.Key = sk.Value
		digits, id, ok := strings.Cut(sk.Value, "#")
		msec, perr := strconv.ParseInt(digits, 10, 64)
		if ok && len(digits) == 20 && perr == nil && api.ValidBatchID(id) {
			m = ledger.RetentionMarker{Key: sk.Value, BatchID: id, ExpiresAt: FromMs(msec)}
		}
	}
	return m
}
