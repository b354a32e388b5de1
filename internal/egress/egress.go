// Package egress decides which network addresses bulkrun's outgoing calls
// (the webhook pipeline) may reach, so that a caller who can submit a batch
// cannot make the item function read the instance metadata service, the
// emulator, or anything else on a private network and store the answer as
// an item's output.
//
// # Rule
//
// An address is non-public when it is, after unmapping an IPv4-mapped IPv6
// address (::ffff:a.b.c.d) and the IPv4 address inside a NAT64 address
// (64:ff9b::/96):
//
//   - unspecified (0.0.0.0, ::) or in 0.0.0.0/8 ("this network");
//   - loopback (127.0.0.0/8, ::1);
//   - link-local (169.254.0.0/16 — which holds the EC2 and Lambda metadata
//     and credential endpoints — and fe80::/10);
//   - private (RFC 1918: 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16) or
//     unique-local (fc00::/7);
//   - shared address space (100.64.0.0/10, RFC 6598), IETF protocol
//     assignments (192.0.0.0/24), benchmarking (198.18.0.0/15), reserved
//     (240.0.0.0/4, which holds the broadcast address), or multicast.
//
// A non-public address is refused unless the allow-list names it: by a CIDR
// or an IP address that contains it, or by the host name the call was made
// to. Public addresses are always allowed: the allow-list exempts
// destinations from the rule, it does not confine the webhook to them.
//
// # Allow-list
//
// An allow-list is a comma-separated list (config.EnvWebhookAllow, the
// stack's WebhookAllow prop) of entries, each one of:
//
//	10.1.2.0/24         a CIDR (IPv4 or IPv6)
//	10.1.2.3            an IP address (taken as a /32 or /128)
//	hooks.internal      a host name, matched case-insensitively
//	*.corp.example      every host name under a domain (not the domain itself)
//
// Entries carry no port: an allowed host or network is allowed on every port.
//
// # Where the rule is applied
//
// Twice: when a batch is submitted ([Policy.CheckURL], which also resolves
// the host name and refuses it when it resolves to a refused address), and
// when each connection is dialled ([Policy.DialContext], a net.Dialer
// ControlContext hook that sees the address actually connected to). The
// second check is what DNS rebinding (a name that resolves to a public
// address at submit and to 127.0.0.1 later) and redirects cannot get round.
//
// Every refusal is a *[DeniedError] (errors.Is(err, [ErrDenied])).
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrDenied is what every refusal matches with errors.Is.
var ErrDenied = errors.New("destination not allowed")

// DeniedError is a refused destination. Its message is
// `{host} resolves to {addr}, a {kind} address, which the webhook allow-list
// does not name` (or `{addr} is a {kind} address, ...` when the host is an
// address literal or unknown).
type DeniedError struct {
	Host string     // the host name or address literal as given ("" when unknown)
	Addr netip.Addr // the refused address
	Kind string     // why the address is non-public: "loopback", "link-local", "private", ...
}

func (e *DeniedError) Error() string {
	const tail = "which the webhook allow-list does not name"
	if _, err := netip.ParseAddr(e.Host); err == nil || e.Host == "" {
		return fmt.Sprintf("%s is a %s address, %s", e.Addr, e.Kind, tail)
	}
	return fmt.Sprintf("%s resolves to %s, a %s address, %s", e.Host, e.Addr, e.Kind, tail)
}

// Is reports whether target is ErrDenied.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// Policy is a parsed allow-list. The zero value and nil allow no non-public
// address. A Policy is immutable and safe for concurrent use.
type Policy struct {
	nets    []netip.Prefix
	hosts   map[string]bool // lower-case exact host names
	domains []string        // lower-case ".suffix" of "*.suffix" entries
	entries []string        // the entries as given, for String
}

// Parse parses a comma-separated allow-list (see the package comment).
// Spaces around entries and empty entries are ignored; "" gives an empty
// policy. An entry that is neither a CIDR, an address, a host name nor a
// "*.domain" is an error naming it.
func Parse(list string) (*Policy, error) {
	p := &Policy{hosts: map[string]bool{}}
	for _, e := range strings.Split(list, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		p.entries = append(p.entries, e)
		if strings.Contains(e, "/") {
			pf, err := netip.ParsePrefix(e)
			if err != nil {
				return nil, fmt.Errorf("egress: allow-list entry %q: not a CIDR: %v", e, err)
			}
			p.nets = append(p.nets, pf.Masked())
			continue
		}
		if a, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
			a = a.Unmap()
			p.nets = append(p.nets, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		name, wildcard := strings.CutPrefix(strings.ToLower(e), "*.")
		if !validHostName(name) {
			return nil, fmt.Errorf("egress: allow-list entry %q: want a CIDR, an IP address, a host name or *.domain", e)
		}
		if wildcard {
			p.domains = append(p.domains, "."+name)
		} else {
			p.hosts[name] = true
		}
	}
	return p, nil
}

// MustParse is Parse that panics on error, for tests and constants.
func MustParse(list string) *Policy {
	p, err := Parse(list)
	if err != nil {
		panic(err)
	}
	return p
}

// String returns the entries as given, comma-separated.
func (p *Policy) String() string {
	if p == nil {
		return ""
	}
	return strings.Join(p.entries, ",")
}

// validHostName reports whether s is a DNS host name: dot-separated labels
// of 1–63 letters, digits and hyphens, 1–253 bytes in all.
func validHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || 'A' <= c && c <= 'Z') {
				return false
			}
		}
	}
	return true
}

// nonPublic lists the ranges that netip's predicates do not cover, with
// their kind.
var nonPublic = []struct {
	prefix netip.Prefix
	kind   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (RFC 6598)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
}

var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// Kind returns why a is non-public ("loopback", "link-local", "private",
// "unique-local", "unspecified", "multicast", "reserved", "shared (RFC
// 6598)"), or "" when a is public. An IPv4-mapped address and a NAT64
// address are judged by the IPv4 address they carry.
func Kind(a netip.Addr) string {
	a = a.Unmap()
	if a.Is6() && nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast():
		return "multicast"
	case a.IsPrivate() && a.Is4():
		return "private"
	case a.IsPrivate():
		return "unique-local"
	}
	for _, r := range nonPublic {
		if r.prefix.Contains(a) {
			return r.kind
		}
	}
	return ""
}

// hostAllowed reports whether the allow-list names host (a host name, not
// an address literal).
func (p *Policy) hostAllowed(host string) bool {
	if p == nil || host == "" {
		return false
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if p.hosts[host] {
		return true
	}
	for _, d := range p.domains {
		if strings.HasSuffix(host, d) {
			return true
		}
	}
	return false
}

// Check returns nil when a call to host may connect to addr, and a
// *DeniedError otherwise. host is the name the call was made to ("" when
// unknown, or an address literal).
func (p *Policy) Check(host string, addr netip.Addr) error {
	addr = addr.Unmap()
	kind := Kind(addr)
	if kind == "" {
		return nil
	}
	if p != nil {
		for _, n := range p.nets {
			if n.Contains(addr) {
				return nil
			}
		}
		if p.hostAllowed(host) {
			return nil
		}
	}
	return &DeniedError{Host: host, Addr: addr, Kind: kind}
}

// ResolveTimeout bounds the name lookup of CheckURL.
const ResolveTimeout = 3 * time.Second

// CheckURL applies the rule to an absolute URL before any call is made:
// an address literal is checked as is; a host name the allow-list names is
// allowed; any other host name is resolved (with resolver, net.DefaultResolver
// when nil, within ResolveTimeout) and refused when any of its addresses is
// refused. A name that does not resolve is not refused here: the dial-time
// check still applies when a call is made. Errors: a *DeniedError.
func (p *Policy) CheckURL(ctx context.Context, resolver *net.Resolver, u *url.URL) error {
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		return p.Check(host, a)
	}
	if p.hostAllowed(host) {
		return nil
	}
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, ResolveTimeout)
	defer cancel()
	addrs, err := resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if err := p.Check(host, a); err != nil {
			return err
		}
	}
	return nil
}

type hostKey struct{}

// Dialer returns a net.Dialer whose ControlContext hook refuses, with a
// *DeniedError (or, for an address it cannot parse, an error wrapping
// ErrDenied), every connection to an address p refuses — after name
// resolution, on the address actually dialled. Use its DialContext through
// [Policy.DialContext], which passes the host name to the hook.
func (p *Policy) Dialer(base *net.Dialer) *net.Dialer {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if base != nil {
		c := *base
		d = &c
	}
	d.Control = nil
	d.ControlContext = func(ctx context.Context, network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: cannot check dialled address %q: %v", ErrDenied, address, err)
		}
		host, _ := ctx.Value(hostKey{}).(string)
		return p.Check(host, ap.Addr())
	}
	return d
}

// DialContext returns a function for http.Transport.DialContext that dials
// through p.Dialer(base), so that every connection (including one made
// after a redirect or to a name that now resolves elsewhere) is checked.
// Its error wraps a *DeniedError for a refused address.
func (p *Policy) DialContext(base *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := p.Dialer(base)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		return d.DialContext(context.WithValue(ctx, hostKey{}, host), network, addr)
	}
}
