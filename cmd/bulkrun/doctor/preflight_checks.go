package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	kmstypes "github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/smithy-go"

	"github.com/bulkrun/bulkrun/internal/blob"
)

// sourceBuckets: each SourceBuckets bucket is in the stack's Region
// (GetBucketLocation; another Region's bucket answers the functions' reads
// with 301 PermanentRedirect, which the SDK does not follow) and its
// default encryption is one the functions may decrypt (GetBucketEncryption:
// SSE-S3, the AWS managed aws/s3 key, or a customer managed key among the
// stack's KMSKeys).
func (d *checker) sourceBuckets(ctx context.Context) Check {
	ck := Check{Check: "source-buckets", Status: OK}
	if len(d.plan.sourceBuckets) == 0 {
		ck.Detail = "no SourceBuckets"
		if !d.plan.fromTemplate {
			ck.Detail += " (or unknown: pass --template)"
		}
		return ck
	}
	s3c := blob.NewS3(d.aws)
	var parts, fixes, warns []string
	for _, b := range d.plan.sourceBuckets {
		region, err := blob.New(s3c, "").BucketRegion(ctx, b)
		if err != nil {
			parts = append(parts, b+": GetBucketLocation failed: "+errString(err))
			warns = append(warns, "cannot read "+b+"'s Region: another account's bucket must let the caller read its location, and the stack's functions read its objects (docs/sources.md, \"Sources in another account\")")
			continue
		}
		if region != d.aws.Region {
			parts = append(parts, fmt.Sprintf("%s is in %s", b, region))
			fixes = append(fixes, fmt.Sprintf("%s is in %s, the stack in %s: S3 answers the functions' calls with 301 PermanentRedirect, which they do not follow, and submit refuses every batch from it; name a bucket in %s (S3 Replication copies one), or deploy the stack in %s",
				b, region, d.aws.Region, d.aws.Region, region))
			continue
		}
		enc, err := s3c.GetBucketEncryption(ctx, &s3.GetBucketEncryptionInput{Bucket: aws.String(b)})
		var ae smithy.APIError
		switch {
		case errors.As(err, &ae) && ae.ErrorCode() == "ServerSideEncryptionConfigurationNotFoundError":
			parts = append(parts, b+": "+region+", no default encryption")
			continue
		case err != nil:
			parts = append(parts, b+": "+region+", GetBucketEncryption failed: "+errString(err))
			warns = append(warns, "cannot read "+b+"'s default encryption (s3:GetEncryptionConfiguration): if it is SSE-KMS with a customer managed key, name the key in KMSKeys")
			continue
		}
		kind, key := "SSE-S3", ""
		if enc.ServerSideEncryptionConfiguration != nil {
			for _, r := range enc.ServerSideEncryptionConfiguration.Rules {
				if def := r.ApplyServerSideEncryptionByDefault; def != nil && def.SSEAlgorithm != s3types.ServerSideEncryptionAes256 {
					kind, key = string(def.SSEAlgorithm), aws.ToString(def.KMSMasterKeyID)
				}
			}
		}
		switch {
		case kind == "SSE-S3":
			parts = append(parts, b+": "+region+", SSE-S3")
		case key == "" || key == "alias/aws/s3":
			parts = append(parts, b+": "+region+", "+kind+" with the AWS managed key aws/s3")
		case keyCovered(key, d.plan.kmsKeys):
			parts = append(parts, b+": "+region+", "+kind+" with "+key+" (in KMSKeys)")
		default:
			parts = append(parts, b+": "+region+", "+kind+" with "+key)
			fixes = append(fixes, fmt.Sprintf("%s encrypts with the customer managed key %s, which the functions may not use: its objects' reads are refused (AccessDenied, kms:Decrypt); add the key's ARN to KMSKeys (-c kmsKeys=…: kms:Decrypt through S3 only), and let the stack's roles use it in the key policy if the key is another account's", b, key))
		}
	}
	ck.Detail = strings.Join(parts, "; ")
	switch {
	case len(fixes) > 0:
		ck.Status, ck.Fix = Fix, strings.Join(append(fixes, warns...), "; ")
	case len(warns) > 0:
		ck.Status, ck.Fix = Warn, strings.Join(warns, "; ")
	}
	return ck
}

// keyCovered says whether a bucket's key (an id, an ARN or an alias) is
// one of the stack's KMSKeys (ARNs).
func keyCovered(key string, keys []string) bool {
	for _, k := range keys {
		if k == key || strings.HasSuffix(k, "/"+key) || strings.HasSuffix(key, "/"+k) {
			return true
		}
	}
	return false
}

// The service principals that publish to the alarm topic.
const (
	cloudwatchPrincipal = "cloudwatch.amazonaws.com"
	eventsPrincipal     = "events.amazonaws.com"
)

// alarmTopic: the alarm topic is in the stack's Region; if encrypted, not
// with aws/sns and with a key whose policy lets CloudWatch (and, for the
// batch events, EventBridge) use it (kms:Decrypt, kms:GenerateDataKey*);
// and its access policy lets EventBridge publish the batch events. Any of
// these wrong, the deploy succeeds and the notifications are dropped,
// silently.
func (d *checker) alarmTopic(ctx context.Context) Check {
	ck := Check{Check: "alarm-topic", Status: OK}
	if len(d.plan.alarmTopics) == 0 {
		ck.Detail = "no AlarmTopicARN: the alarms have no actions"
		if !d.plan.fromTemplate {
			ck.Detail = "no alarm topic known (pass --template)"
		}
		return ck
	}
	principals := []string{cloudwatchPrincipal}
	if d.plan.eventAlarms {
		principals = append(principals, eventsPrincipal)
	}
	var parts, fixes, warns []string
	for _, t := range d.plan.alarmTopics {
		key, keyPolicy, topicPolicy, err := d.topic(ctx, t)
		if err != nil {
			parts = append(parts, t.name()+": "+err.Error())
			warns = append(warns, "cannot read "+t.name()+" (sns:GetTopicAttributes, kms:DescribeKey, kms:GetKeyPolicy): check its key and policy by hand (docs/operations.md, \"The alarm topic\")")
			continue
		}
		if t.arn != "" {
			if r := strings.Split(t.arn, ":"); len(r) > 3 && r[3] != d.aws.Region {
				fixes = append(fixes, fmt.Sprintf("%s is in %s, the stack in %s: an alarm notifies only a topic of its own Region; name one in %s", t.arn, r[3], d.aws.Region, d.aws.Region))
			}
		}
		desc := "not encrypted"
		switch {
		case key == "":
		case key == "aws-managed":
			desc = "encrypted with the AWS managed key aws/sns"
			fixes = append(fixes, t.name()+" is encrypted with aws/sns, whose policy no service principal may use: CloudWatch and EventBridge cannot publish to it, and every alarm is dropped; encrypt it with a customer managed key whose policy allows "+strings.Join(principals, " and ")+" kms:Decrypt and kms:GenerateDataKey* (docs/operations.md, \"The alarm topic\")")
		default:
			desc = "encrypted with " + key
			var missing []string
			for _, p := range principals {
				if keyPolicy == nil || !allowsService(keyPolicy, p, "kms:Decrypt", "kms:GenerateDataKey") {
					missing = append(missing, p)
				}
			}
			if len(missing) > 0 {
				fixes = append(fixes, fmt.Sprintf("the key policy of %s (%s) does not let %s use it: those notifications are dropped; allow them kms:Decrypt and kms:GenerateDataKey* (docs/operations.md, \"The alarm topic\")", t.name(), key, strings.Join(missing, " and ")))
			}
		}
		if d.plan.eventAlarms && !allowsService(topicPolicy, eventsPrincipal, "sns:Publish") {
			fixes = append(fixes, fmt.Sprintf("the access policy of %s does not let %s publish: the batch events (threshold exceeded, refused, paused) go to the schedule dead-letter queue instead; allow it sns:Publish (infra/README.md, \"Operations\")", t.name(), eventsPrincipal))
		}
		parts = append(parts, t.name()+": "+desc)
	}
	ck.Detail = strings.Join(parts, "; ")
	switch {
	case len(fixes) > 0:
		ck.Status, ck.Fix = Fix, strings.Join(append(fixes, warns...), "; ")
	case len(warns) > 0:
		ck.Status, ck.Fix = Warn, strings.Join(warns, "; ")
	}
	return ck
}

// awsSNSKey says whether a topic's KmsMasterKeyId names the AWS managed
// key aws/sns: its alias, or the alias's ARN.
func awsSNSKey(key string) bool {
	return key == "alias/aws/sns" || strings.HasSuffix(key, ":alias/aws/sns")
}

// topic returns a topic's key ("" none, "aws-managed" for aws/sns, or the
// key as named), the key's policy and the topic's access policy: from the
// template for a topic it creates, from SNS and KMS for an existing one.
func (d *checker) topic(ctx context.Context, t topicPlan) (key string, keyPolicy, topicPolicy map[string]any, err error) {
	if t.arn == "" {
		if awsSNSKey(t.key) {
			return "aws-managed", nil, t.topicPolicy, nil
		}
		return t.key, t.keyPolicy, t.topicPolicy, nil
	}
	out, err := sns.NewFromConfig(d.aws).GetTopicAttributes(ctx, &sns.GetTopicAttributesInput{TopicArn: aws.String(t.arn)})
	if err != nil {
		return "", nil, nil, fmt.Errorf("GetTopicAttributes: %s", errString(err))
	}
	if p := out.Attributes["Policy"]; p != "" {
		_ = json.Unmarshal([]byte(p), &topicPolicy)
	}
	key = out.Attributes["KmsMasterKeyId"]
	if key == "" {
		return "", nil, topicPolicy, nil
	}
	if awsSNSKey(key) {
		return "aws-managed", nil, topicPolicy, nil
	}
	kc := kms.NewFromConfig(d.aws)
	dk, err := kc.DescribeKey(ctx, &kms.DescribeKeyInput{KeyId: aws.String(key)})
	if err != nil {
		return key, nil, topicPolicy, fmt.Errorf("DescribeKey %s: %s", key, errString(err))
	}
	if dk.KeyMetadata != nil && dk.KeyMetadata.KeyManager == kmstypes.KeyManagerTypeAws {
		return "aws-managed", nil, topicPolicy, nil
	}
	kp, err := kc.GetKeyPolicy(ctx, &kms.GetKeyPolicyInput{KeyId: aws.String(key), PolicyName: aws.String("default")})
	if err != nil {
		return key, nil, topicPolicy, fmt.Errorf("GetKeyPolicy %s: %s", key, errString(err))
	}
	_ = json.Unmarshal([]byte(aws.ToString(kp.Policy)), &keyPolicy)
	return key, keyPolicy, topicPolicy, nil
}
