package cli

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLISaysWhatIsMissing guards docs/cli.md "Reaching the stack, submitting, watching": "a CLI that cannot reach
// the stack says what is missing and how to fix it": without a region,
// credentials, a reachable endpoint or a deployed stack, the CLI printed the
// SDK's raw error. Each case gets a *SetupError naming what is missing and
// a sentence with the fix.
func TestCLISaysWhatIsMissing(t *testing.T) {
	// A port nothing listens on: take one and close it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	// CloudFormation's answer for a stack that does not exist (Query
	// protocol, as AWS sends it).
	cfn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`<ErrorResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/"><Error><Type>Sender</Type><Code>ValidationError</Code><Message>Stack with id bulkrun does not exist</Message></Error><RequestId>r1</RequestId></ErrorResponse>`))
	}))
	defer cfn.Close()
	tests := []struct {
		name        string
		env         map[string]string
		wantMissing string
		says        []string
	}{
		{"no region", map[string]string{"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
			"region", []string{"no AWS region", "--region", "AWS_REGION"}},
		{"no credentials", map[string]string{"AWS_REGION": "us-east-1"},
			"credentials", []string{"no AWS credentials", "--profile", "AWS_ACCESS_KEY_ID"}},
		{"unreachable endpoint", map[string]string{"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_ENDPOINT_URL": closed, "AWS_MAX_ATTEMPTS": "1"},
			"endpoint", []string{"cannot reach " + closed, "is the emulator running", "AWS_ENDPOINT_URL"}},
		{"stack not deployed", map[string]string{"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_ENDPOINT_URL": cfn.URL},
			"stack", []string{`stack "bulkrun" is not deployed`, "make deploy", "--stack"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Nothing from this machine's AWS setup: no files, no IMDS.
			none := filepath.Join(t.TempDir(), "none")
			for _, k := range []string{"AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID",
				"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_CLOUDFORMATION", "BULKRUN_STACK",
				"AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_MAX_ATTEMPTS"} {
				t.Setenv(k, "")
				os.Unsetenv(k)
			}
			t.Setenv("AWS_CONFIG_FILE", none)
			t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
			t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var out, errw bytes.Buffer
			cmd := New(&out, &errw)
			cmd.SetArgs([]string{"status", "b-1"})
			err := cmd.Execute()
			var se *SetupError
			if !errors.As(err, &se) || se.Missing != tt.wantMissing {
				t.Fatalf("status: %v, want a SetupError missing %q", err, tt.wantMissing)
			}
			for _, s := range tt.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q does not say %q", err, s)
				}
			}
		})
	}
}

// TestResultsOutcomes guards `bulkrun results --outcome`: only outcomes
// that have results files are accepted (in the order given, once each);
// the default is every terminal outcome.
func TestResultsOutcomes(t *testing.T) {
	tests := []struct {
		name    string
		in      []string
		want    string
		wantErr bool
	}{
		{"default", nil, "succeeded,failed,quarantined,cancelled", false},
		{"two, repeated", []string{"failed", " quarantined", "failed"}, "failed,quarantined", false},
		{"not terminal", []string{"in_flight"}, "", true},
		{"unknown", []string{"failure"}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resultOutcomes(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("resultOutcomes(%q): %v, want error %v", tt.in, err, tt.wantErr)
			}
			var names []string
			for _, o := range got {
				names = append(names, string(o))
			}
			if s := strings.Join(names, ","); !tt.wantErr && s != tt.want {
				t.Fatalf("resultOutcomes(%q) = %s, want %s", tt.in, s, tt.want)
			}
		})
	}
}
