package egress_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/internal/egress"
)

// TestSSRFKind guards the product line "loopback, link-local, private and
// unique-local addresses are refused": every non-public range, in IPv4,
// IPv6, IPv4-mapped and NAT64 form, is classified non-public.
func TestSSRFKind(t *testing.T) {
	tests := []struct {
		addr string
		want string
	}{
		{"169.254.169.254", "link-local"}, // EC2 instance metadata
		{"169.254.170.2", "link-local"},   // ECS/Lambda credential endpoint
		{"fe80::1", "link-local"},
		{"127.0.0.1", "loopback"},
		{"127.9.9.9", "loopback"},
		{"::1", "loopback"},
		{"10.0.0.1", "private"},
		{"172.16.5.4", "private"},
		{"172.31.255.255", "private"},
		{"192.168.1.1", "private"},
		{"fc00::1", "unique-local"},
		{"fd12:3456::1", "unique-local"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"::", "unspecified"},
		{"100.64.0.1", "shared (RFC 6598)"},
		{"224.0.0.1", "multicast"},
		{"255.255.255.255", "reserved"},
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:169.254.169.254", "link-local"},
		{"::ffff:10.1.2.3", "private"},
		{"64:ff9b::a9fe:a9fe", "link-local"}, // NAT64 of 169.254.169.254
		{"8.8.8.8", ""},
		{"172.32.0.1", ""},
		{"2606:4700::1111", ""},
		{"::ffff:8.8.8.8", ""},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			if got := egress.Kind(netip.MustParseAddr(tt.addr)); got != tt.want {
				t.Errorf("Kind(%s) = %q, want %q", tt.addr, got, tt.want)
			}
		})
	}
}

// TestSSRFAllowList guards the product line "refused unless the allow-list
// names them": CIDRs, addresses and host names exempt exactly what they name.
func TestSSRFAllowList(t *testing.T) {
	p := egress.MustParse(" 10.1.2.0/24, 127.0.0.1 ,hooks.internal,*.corp.example,fd00::/8")
	tests := []struct {
		host, addr string
		allowed    bool
	}{
		{"", "10.1.2.77", true},
		{"", "10.1.3.1", false},
		{"", "127.0.0.1", true},
		{"", "::ffff:127.0.0.1", true},
		{"", "127.0.0.2", false},
		{"hooks.internal", "192.168.0.9", true},
		{"HOOKS.internal.", "192.168.0.9", true},
		{"other.internal", "192.168.0.9", false},
		{"a.corp.example", "10.9.9.9", true},
		{"corp.example", "10.9.9.9", false},
		{"", "fd00::5", true},
		{"", "fc00::5", false},
		{"", "169.254.169.254", false},
		{"example.com", "93.184.216.34", true}, // public: always allowed
	}
	for _, tt := range tests {
		err := p.Check(tt.host, netip.MustParseAddr(tt.addr))
		if (err == nil) != tt.allowed {
			t.Errorf("Check(%q, %s) = %v, want allowed %v", tt.host, tt.addr, err, tt.allowed)
		}
		if err != nil && !errors.Is(err, egress.ErrDenied) {
			t.Errorf("Check(%q, %s) = %v, not ErrDenied", tt.host, tt.addr, err)
		}
	}
	var none *egress.Policy
	if err := none.Check("", netip.MustParseAddr("127.0.0.1")); !errors.Is(err, egress.ErrDenied) {
		t.Errorf("nil policy: Check(127.0.0.1) = %v, want ErrDenied", err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, list := range []string{"10.0.0.0/33", "not a host", "http://x", "*.", "a..b", "-a.b"} {
		if _, err := egress.Parse(list); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", list)
		} else if !strings.Contains(err.Error(), "allow-list entry") {
			t.Errorf("Parse(%q) = %v, does not name the entry", list, err)
		}
	}
	if p, err := egress.Parse(""); err != nil || p.String() != "" {
		t.Errorf(`Parse("") = %v, %v`, p, err)
	}
}

// TestSSRFCheckURL guards the submit-time check: address literals and host
// names that resolve to refused addresses are refused with a message naming
// the address and its kind.
func TestSSRFCheckURL(t *testing.T) {
	tests := []struct {
		url     string
		allow   string
		wantMsg string // "" = allowed
	}{
		{"http://169.254.169.254/latest/meta-data/iam/security-credentials/", "", "169.254.169.254 is a link-local address, which the webhook allow-list does not name"},
		{"http://127.0.0.1:8080/x", "", "127.0.0.1 is a loopback address"},
		{"http://[::ffff:127.0.0.1]:8080/x", "", "127.0.0.1 is a loopback address"},
		{"http://[fd00::1]/", "", "fd00::1 is a unique-local address"},
		{"http://localhost:8080/x", "", "localhost resolves to"},
		{"http://127.0.0.1:8080/x", "127.0.0.1/32", ""},
		{"http://localhost:8080/x", "localhost", ""},
		{"http://8.8.8.8/", "", ""},
		{"http://does-not-resolve.invalid/", "", ""}, // left to the dial-time check
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			u, _ := url.Parse(tt.url)
			err := egress.MustParse(tt.allow).CheckURL(context.Background(), nil, u)
			if tt.wantMsg == "" {
				if err != nil {
					t.Fatalf("CheckURL = %v, want allowed", err)
				}
				return
			}
			if !errors.Is(err, egress.ErrDenied) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("CheckURL = %v, want ErrDenied containing %q", err, tt.wantMsg)
			}
		})
	}
}

// TestSSRFDialRefusesRedirectToPrivate guards the dial-time check: a client
// that follows redirects, with the egress dialer, is refused the connection
// to a non-public address that an allowed host redirected it to, and the
// second server is never reached.
func TestSSRFDialRefusesRedirectToPrivate(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.2:0") // Linux routes all of 127/8 to lo
	if err != nil {
		t.Skipf("no 127.0.0.2 on this host: %v", err)
	}
	hidden := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the redirect target was reached")
	}))
	hidden.Listener = ln
	hidden.Start()
	defer hidden.Close()
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, hidden.URL+"/secret", http.StatusFound)
	}))
	defer allowed.Close()

	p := egress.MustParse("127.0.0.1")
	c := &http.Client{Transport: &http.Transport{DialContext: p.DialContext(nil)}}
	resp, err := c.Get(allowed.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatal("redirect to 127.0.0.2 followed, want refused")
	}
	var de *egress.DeniedError
	if !errors.As(err, &de) || de.Addr != netip.MustParseAddr("127.0.0.2") || de.Kind != "loopback" {
		t.Fatalf("error = %v, want a *DeniedError for 127.0.0.2", err)
	}
}
