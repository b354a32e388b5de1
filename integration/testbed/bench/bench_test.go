package bench

import (
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
)

// A run's clients close idle connections before the emulator would
// (faultproxy.EmulatorKeepAlive), whether the config has the SDK's default
// client or none yet; the client's other settings stay.
func TestRunClosesIdleConnectionsBeforeTheEmulator(t *testing.T) {
	custom := awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) { t.MaxIdleConnsPerHost = 7 })
	for name, c := range map[string]aws.HTTPClient{"none": nil, "default": awshttp.NewBuildableClient(), "custom": custom} {
		cfg := idleUnderEmulator(aws.Config{HTTPClient: c})
		bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient)
		if !ok {
			t.Fatalf("%s: client %T, want *awshttp.BuildableClient", name, cfg.HTTPClient)
		}
		tr := bc.GetTransport()
		if tr.IdleConnTimeout != faultproxy.UpstreamIdleTimeout || tr.IdleConnTimeout >= faultproxy.EmulatorKeepAlive {
			t.Errorf("%s: idle timeout %v, want %v (under %v)", name, tr.IdleConnTimeout, faultproxy.UpstreamIdleTimeout, faultproxy.EmulatorKeepAlive)
		}
		if name == "custom" && tr.MaxIdleConnsPerHost != 7 {
			t.Errorf("custom: MaxIdleConnsPerHost %d, want 7 (kept)", tr.MaxIdleConnsPerHost)
		}
	}
}
