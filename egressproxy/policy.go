package egressproxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// pattern is a parsed allow-list entry.
type pattern struct {
	name string // lower-case, no trailing dot; without the "*." of a wildcard
	wild bool   // any subdomain of name, not name itself
	port int    // 0: 80 and 443
}

// ValidPattern reports why p cannot be an allow-list pattern. The list is by
// name only: IP literals are refused, as the proxy never dials an address
// it did not resolve and check itself.
func ValidPattern(p string) error {
	_, err := parsePattern(p)
	return err
}

func parsePattern(s string) (pattern, error) {
	if s == "" {
		return pattern{}, errors.New("empty pattern")
	}
	if strings.Contains(s, "/") {
		return pattern{}, errors.New("a host name, not a URL (no scheme or path)")
	}
	var pt pattern
	host := strings.ToLower(s)
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		ps := host[i+1:]
		n, err := strconv.Atoi(ps)
		if err != nil || strings.Trim(ps, "0123456789") != "" || n < 1 || n > 65535 {
			return pattern{}, fmt.Errorf("bad port %q", ps)
		}
		host, pt.port = host[:i], n
	}
	host = strings.TrimSuffix(host, ".")
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		host, pt.wild = rest, true
	}
	if strings.Contains(host, "*") {
		return pattern{}, errors.New(`"*" only as a whole first label ("*.example.com")`)
	}
	if isIPLiteral(host) {
		return pattern{}, errors.New("IP literals are not allowed; use a host name")
	}
	if err := checkName(host); err != nil {
		return pattern{}, err
	}
	if pt.wild && !strings.Contains(host, ".") {
		return pattern{}, errors.New(`a wildcard needs at least two labels after "*." ("*.example.com", not "*.com")`)
	}
	pt.name = host
	return pt, nil
}

// checkName accepts lower-case ASCII DNS names.
func checkName(h string) error {
	if h == "" || len(h) > 253 {
		return errors.New("bad host name length")
	}
	for l := range strings.SplitSeq(h, ".") {
		if l == "" || len(l) > 63 {
			return fmt.Errorf("bad label %q", l)
		}
		for _, c := range []byte(l) {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
				return fmt.Errorf("invalid character %q", c)
			}
		}
	}
	return nil
}

// isIPLiteral also catches the all-numeric forms ("127.1", "2130706433")
// that some resolvers read as addresses.
func isIPLiteral(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	last := h[strings.LastIndexByte(h, '.')+1:]
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// normHost canonicalises a requested host name, or says why it is refused.
func normHost(h string) (string, string) {
	for i := 0; i < len(h); i++ {
		if h[i] >= 0x80 { // before lower-casing: "\u212a" (Kelvin) would become "k"
			return strings.ToLower(h), "invalid host name"
		}
	}
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if isIPLiteral(h) {
		return h, "IP literals are not allowed; use a host name"
	}
	if checkName(h) != nil {
		return h, "invalid host name"
	}
	return h, ""
}

// check says why host:port is not allowed ("" if it is).
func (p *Proxy) check(host string, port int) string {
	named := false
	for _, pt := range p.allow {
		if pt.name == host && !pt.wild || pt.wild && strings.HasSuffix(host, "."+pt.name) {
			named = true
			if pt.port == port || pt.port == 0 && (port == 80 || port == 443) {
				return ""
			}
		}
	}
	if named {
		return fmt.Sprintf("port %d not allowed", port)
	}
	return "not on the allow-list"
}

// Forbidden reports whether the proxy must refuse to dial a: anything not
// plainly on the public internet, including IPv6 forms that embed (and so
// reach) a forbidden IPv4 address.
func Forbidden(a netip.Addr) bool { return classify(a) != "" }

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052: IPv4 in the last 32 bits
	sixToFour = netip.MustParsePrefix("2002::/16")    // RFC 3056: IPv4 in bits 16-47
)

// forbiddenTable is searched in order, so specific entries come first.
// The documentation ranges are not in it: they are never routed on the
// internet, and some networks (CI sandboxes, this project's own) answer
// with them for the package registries. What they could reach inside such
// a network is the host itself, which isLocal refuses.
var forbiddenTable = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/32"), "unspecified"},
	{netip.MustParsePrefix("0.0.0.0/8"), "this network"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "CGNAT"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.169.254/32"), "metadata"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "IPv4-translated"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "NAT64 local-use"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
	{netip.MustParsePrefix("2001::/32"), "Teredo"},
	{netip.MustParsePrefix("2001:2::/48"), "benchmarking"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "metadata"},
	{netip.MustParsePrefix("fc00::/7"), "private"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// classify names the forbidden range a is in ("" if a may be dialed).
func classify(a netip.Addr) string {
	if !a.IsValid() {
		return "invalid"
	}
	a = a.Unmap().WithZone("") // Prefix.Contains is false for zoned addresses
	for _, f := range forbiddenTable {
		if f.prefix.Contains(a) {
			return f.why
		}
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		if why := classify(netip.AddrFrom4([4]byte(b[12:]))); why != "" {
			return "NAT64 of " + why
		}
	case sixToFour.Contains(a):
		if why := classify(netip.AddrFrom4([4]byte(b[2:6]))); why != "" {
			return "6to4 of " + why
		}
	}
	return ""
}

// isLocal reports an address of one of this host's interfaces: whatever
// range it is in, it reaches the host's own services.
func isLocal(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: refuse
	}
	a = a.Unmap().WithZone("")
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
				return true
			}
		}
	}
	return false
}

// refused is the default check: a forbidden range or this host.
func refused(a netip.Addr) bool { return Forbidden(a) || isLocal(a) }

// refusal names why a was refused.
func refusal(a netip.Addr) string {
	if why := classify(a); why != "" {
		return why
	}
	if isLocal(a) {
		return "an address of this host"
	}
	return "forbidden"
}
