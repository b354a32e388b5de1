package wire

import (
	"unicode/utf8"
)

// MaxEventBytes is Lambda's limit on the payload of a synchronous
// invocation, in bytes: 6 MB, 6,291,456 bytes (Lambda quotas, "Invocation
// payload (request and response)", 6 MB each for request and response,
// synchronous: https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
// API Gateway passes a request to the submit function as a proxy event
// holding the body (a JSON string, escaped; base64 when API Gateway takes
// it as binary), the headers twice (headers and multiValueHeaders), the
// path, query and path parameters and the request context ("Input format
// of a Lambda function for proxy integration", API Gateway developer
// guide:
// https://docs.aws.amazon.com/apigateway/latest/developerguide/set-up-lambda-proxy-integrations.html).
// A request whose event is larger never reaches the function: Lambda
// refuses the invocation and API Gateway answers 413 {"message": "Request
// Too Long"}. A body of 5.95 MB whose event is 8.1 MB is such a request;
// so is any body over API Gateway's own 10 MB payload limit ("Amazon API
// Gateway quotas": https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-execution-service-limits-table.html),
// refused with 413 before Lambda is asked.
const MaxEventBytes = 6 << 20

// BodyEventBytes is the number of bytes body takes in a proxy event: the
// length of the JSON string holding it, quotes included, escaped as JSON
// escapes: 2 bytes for a quote, a backslash and \b \f \n \r \t, 6 for
// another control character, for <, > and & (escaped by some encoders),
// for U+2028 and U+2029 and for each byte that is not UTF-8 (its
// replacement, \ufffd). It is an upper bound of what API Gateway's
// encoder writes for a text body.
func BodyEventBytes(body []byte) int {
	n := 2
	for i := 0; i < len(body); {
		c := body[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(body[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 6
		case r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}
