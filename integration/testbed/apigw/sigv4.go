package apigw

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
)

// SignatureError is a request whose SigV4 signature does not verify, with
// the canonical request and string to sign the verifier computed (what
// API Gateway's 403 shows).
type SignatureError struct {
	Reason          string // what is wrong, in API Gateway's words
	CanonicalString string // the canonical request, "" when not computed
	StringToSign    string
}

func (e *SignatureError) Error() string {
	if e.CanonicalString == "" {
		return e.Reason
	}
	return fmt.Sprintf("%s\n\nThe Canonical String for this request should have been\n'%s'\n\nThe String-to-Sign should have been\n'%s'\n",
		e.Reason, e.CanonicalString, e.StringToSign)
}

// MismatchMessage is API Gateway's message for a signature that does not
// match.
const MismatchMessage = "The request signature we calculated does not match the signature you provided. " +
	"Check your AWS Secret Access Key and signing method. Consult the service documentation for details."

// Verify checks the SigV4 signature of r (its Authorization header) with
// the secret access key secrets names for its access key, as the service
// does ("Create a signed AWS API request" and "Elements of an AWS API
// request signature", IAM user guide,
// https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html,
// https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-signing-elements.html).
// body is the request's payload. The canonical request is computed from
// the request as received:
//
//   - the canonical URI is the path as sent (the request target's path,
//     already percent-encoded once), URI-encoded once more — each path
//     segment is encoded twice for every service but S3 — with every
//     byte but the unreserved characters (A–Z a–z 0–9 - _ . ~) and "/"
//     written %XY: "/items/a%2Fb" is "/items/a%252Fb", what the AWS SDK
//     for Go's v4 signer computes (DisableURIPathEscaping false);
//   - the canonical query takes each parameter as sent, percent-decoded
//     ("+" stays a plus: the signature's encoding writes a space %20,
//     never "+"), URI-encodes name and value and sorts them;
//   - the signed headers' values (Host from the request's host), trimmed,
//     inner runs of spaces made one;
//   - the payload's SHA-256 (X-Amz-Content-Sha256 when sent).
//
// It returns nil for a request without an Authorization header (the
// emulator answers it, as API Gateway does, 403 Missing Authentication
// Token), a *SignatureError otherwise when the signature, its scope or
// its access key is wrong.
func Verify(r *http.Request, body []byte, secrets map[string]string) error {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return nil
	}
	alg, rest, _ := strings.Cut(auth, " ")
	if alg != "AWS4-HMAC-SHA256" {
		return &SignatureError{Reason: "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header. Authorization=" + auth}
	}
	fields := map[string]string{}
	for _, part := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[4] != "aws4_request" || fields["SignedHeaders"] == "" || fields["Signature"] == "" {
		return &SignatureError{Reason: "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' parameters. Authorization=" + auth}
	}
	secret, ok := secrets[scope[0]]
	if !ok {
		return &SignatureError{Reason: "The security token included in the request is invalid."}
	}
	amzDate := r.Header.Get("X-Amz-Date")
	if amzDate == "" || !strings.HasPrefix(amzDate, scope[1]) {
		return &SignatureError{Reason: "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header, of the credential's date."}
	}
	signed := strings.Split(fields["SignedHeaders"], ";")
	var headers strings.Builder
	for _, name := range signed {
		headers.WriteString(name + ":" + headerValue(r, name) + "\n")
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		sum := sha256.Sum256(body)
		payload = hex.EncodeToString(sum[:])
	}
	canonical := strings.Join([]string{r.Method, CanonicalURI(requestPath(r)), CanonicalQuery(requestQuery(r)),
		headers.String(), fields["SignedHeaders"], payload}, "\n")
	sum := sha256.Sum256([]byte(canonical))
	credentialScope := strings.Join(scope[1:], "/")
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + credentialScope + "\n" + hex.EncodeToString(sum[:])
	key := []byte("AWS4" + secret)
	for _, s := range scope[1:] {
		key = mac(key, s)
	}
	if want := hex.EncodeToString(mac(key, toSign)); !hmac.Equal([]byte(want), []byte(fields["Signature"])) {
		return &SignatureError{Reason: MismatchMessage, CanonicalString: canonical, StringToSign: toSign}
	}
	return nil
}

func mac(key []byte, s string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(s))
	return h.Sum(nil)
}

// requestPath is the path of r as sent: the request target's, else the
// URL's escaped path.
func requestPath(r *http.Request) string {
	if r.RequestURI != "" && strings.HasPrefix(r.RequestURI, "/") {
		p, _, _ := strings.Cut(r.RequestURI, "?")
		return p
	}
	return r.URL.EscapedPath()
}

// requestQuery is the query of r as sent.
func requestQuery(r *http.Request) string {
	if r.RequestURI != "" && strings.HasPrefix(r.RequestURI, "/") {
		_, q, _ := strings.Cut(r.RequestURI, "?")
		return q
	}
	return r.URL.RawQuery
}

// headerValue is the canonical value of the signed header name: Host
// from the request's host, Content-Length from its length when the
// header map lacks it, other values trimmed and joined with ",", inner
// runs of spaces made one.
func headerValue(r *http.Request, name string) string {
	switch {
	case name == "host":
		if r.Host != "" {
			return r.Host
		}
		return r.URL.Host
	case name == "content-length" && r.Header.Get("Content-Length") == "":
		return fmt.Sprint(r.ContentLength)
	}
	vs := r.Header.Values(name)
	for i, v := range vs {
		vs[i] = strings.Join(strings.Fields(v), " ")
	}
	return strings.Join(vs, ",")
}

// CanonicalURI is a path as sent, URI-encoded once more (each segment
// encoded twice, counting the path's own encoding): every byte but the
// unreserved characters and "/" as %XY; "/" for an empty path.
func CanonicalURI(path string) string {
	if path == "" {
		return "/"
	}
	return uriEncode(path, true)
}

// CanonicalQuery is a query as sent in canonical form: each name and
// value percent-decoded ("+" kept: it is no space here), URI-encoded,
// sorted by name, then value, joined with "&".
func CanonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	var pairs [][2]string
	for _, p := range strings.Split(raw, "&") {
		if p == "" {
			continue
		}
		k, v, _ := strings.Cut(p, "=")
		if dk, err := url.PathUnescape(k); err == nil {
			k = dk
		}
		if dv, err := url.PathUnescape(v); err == nil {
			v = dv
		}
		pairs = append(pairs, [2]string{uriEncode(k, false), uriEncode(v, false)})
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i][0] != pairs[j][0] {
			return pairs[i][0] < pairs[j][0]
		}
		return pairs[i][1] < pairs[j][1]
	})
	out := make([]string, len(pairs))
	for i, p := range pairs {
		out[i] = p[0] + "=" + p[1]
	}
	return strings.Join(out, "&")
}

// uriEncode writes every byte of s but the unreserved characters (and
// "/" when keepSlash) as %XY, upper-case hex.
func uriEncode(s string, keepSlash bool) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' || c == '/' && keepSlash {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}
