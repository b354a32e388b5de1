package layout

// SKUpload is the sort key of an upload claim (pk UPLOAD#{content}).
const SKUpload = "UPLOAD"

// UploadPK is the partition key of the upload claim of content (the
// upload's content digest): "UPLOAD#{content}", sort key SKUpload.
func UploadPK(content string) string { return "UPLOAD#" + content }

// UploadRow is the stored shape of api.UploadClaim.
type UploadRow struct {
	PK          string `dynamodbav:"pk"`
	SK          string `dynamodbav:"sk"`
	BatchID     string `dynamodbav:"batch_id"`
	Source      string `dynamodbav:"source"`
	ClaimedAtMs int64  `dynamodbav:"claimed_at_ms"`
	UntilMs     int64  `dynamodbav:"until_ms"`
	ExpiresAt   int64  `dynamodbav:"expires_at"` // TTL, epoch seconds
	Format      int    `dynamodbav:"fv"`
}
