package bulkrun

import (
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/config"
)

// TracesExporter "otlp" with an endpoint sets OTEL_TRACES_EXPORTER and
// OTEL_EXPORTER_OTLP_ENDPOINT on submit and item only (finalize and sweep
// make no span); the default sets neither anywhere; a bad exporter or
// endpoint is refused naming the prop.
func TestTracesExporterEnvironment(t *testing.T) {
	props := testProps(TargetEmulator)
	props.TracesExporter, props.TracesEndpoint = config.TracesOTLP, "http://collector.example:4318"
	on := synthProps(t, props)
	off := synth(t, TargetEmulator)
	for _, fn := range functionNames {
		env, _ := templateEnv(t, on, fn)
		spans := fn == FunctionSubmit || fn == FunctionItem
		if got := env[config.EnvTracesExporter]; (got == config.TracesOTLP) != spans {
			t.Errorf("%s: %s=%q with TracesExporter otlp", fn, config.EnvTracesExporter, got)
		}
		if got := env[EnvOTLPEndpoint]; (got == props.TracesEndpoint) != spans {
			t.Errorf("%s: %s=%q with TracesEndpoint %s", fn, EnvOTLPEndpoint, got, props.TracesEndpoint)
		}
		if env, _ := templateEnv(t, off, fn); env[config.EnvTracesExporter] != "" || env[EnvOTLPEndpoint] != "" {
			t.Errorf("%s: by default %s=%q %s=%q; want neither", fn, config.EnvTracesExporter, env[config.EnvTracesExporter], EnvOTLPEndpoint, env[EnvOTLPEndpoint])
		}
	}
	for _, bad := range []struct{ exporter, endpoint, prop string }{
		{"jaeger", "", "TracesExporter"},
		{config.TracesOTLP, "localhost:4318", "TracesEndpoint"},
		{"", "http://collector.example:4318", "TracesEndpoint"},
	} {
		p := testProps(TargetEmulator)
		p.TracesExporter, p.TracesEndpoint = bad.exporter, bad.endpoint
		if _, err := derive(p); err == nil || !strings.Contains(err.Error(), bad.prop) {
			t.Errorf("TracesExporter %q TracesEndpoint %q: %v; want an error naming %s", bad.exporter, bad.endpoint, err, bad.prop)
		}
	}
}
