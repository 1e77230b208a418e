package egressproxy

import (
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestValidPattern(t *testing.T) {
	for _, tc := range []struct {
		p    string
		want string // "" valid, else a fragment of the error
	}{
		{"registry.npmjs.org", ""},
		{"*.example.com", ""},
		{"*.a.b.example.com", ""},
		{"git.example.com:22", ""},
		{"*.example.com:8443", ""},
		{"Example.COM", ""},
		{"example.com.", ""},
		{"a-b.c", ""},
		{"localhost", ""},
		{"x.y:65535", ""},
		{"", "empty"},
		{"*", `"*" only`},
		{"*.", `"*" only`},
		{"*.com", "two labels"},
		{"*.com:443", "two labels"},
		{"**.example.com", `"*" only`},
		{"a.*.example.com", `"*" only`},
		{"*example.com", `"*" only`},
		{"10.0.0.1", "IP literal"},
		{"10.0.0.1:443", "IP literal"},
		{"127.1", "IP literal"},
		{"2130706433", "IP literal"},
		{"::1", "invalid character"},
		{"[::1]:443", "invalid character"},
		{"https://example.com", "scheme"},
		{"example.com/path", "scheme"},
		{"example.com:0", "bad port"},
		{"example.com:65536", "bad port"},
		{"example.com:", "bad port"},
		{"example.com:http", "bad port"},
		{"example.com:+80", "bad port"},
		{"example.com:22:22", "invalid character"},
		{"exa_mple.com", "invalid character"},
		{"ex ample.com", "invalid character"},
		{"exämple.com", "invalid character"},
		{"a..b", "bad label"},
		{".example.com", "bad label"},
		{"example.com..", "bad label"},
		{strings.Repeat("a", 64) + ".com", "bad label"},
	} {
		err := ValidPattern(tc.p)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("ValidPattern(%q) = %v, want nil", tc.p, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("ValidPattern(%q) = %v, want error containing %q", tc.p, err, tc.want)
		}
	}
}

func TestNewNamesBadPattern(t *testing.T) {
	_, err := New(Options{Allow: []string{"ok.test", "*.com"}})
	if err == nil || !strings.Contains(err.Error(), `"*.com"`) {
		t.Fatalf("New = %v, want an error naming \"*.com\"", err)
	}
}

func TestMatch(t *testing.T) {
	p, err := New(Options{Allow: []string{
		"registry.npmjs.org", "*.example.com", "git.example.org:22", "Mixed.Case.Test", "dot.test.",
		"api.test", "api.test:8443",
	}})
	if err != nil {
		t.Fatal(err)
	}
	const ok, offList = "", "not on the allow-list"
	for _, tc := range []struct {
		host string
		port int
		want string
	}{
		{"registry.npmjs.org", 443, ok},
		{"registry.npmjs.org", 80, ok},
		{"REGISTRY.npmjs.ORG.", 443, ok},
		{"registry.npmjs.org", 8080, "port 8080 not allowed"},
		{"sub.registry.npmjs.org", 443, offList},
		{"npmjs.org", 443, offList},
		{"registry.npmjs.org.evil.test", 443, offList},
		{"a.example.com", 443, ok},
		{"a.b.c.example.com", 80, ok},
		{"A.Example.Com.", 443, ok},
		{"example.com", 443, offList}, // the apex is not a subdomain
		{"badexample.com", 443, offList},
		{"a.example.com.evil.test", 443, offList},
		{"a.example.com", 22, "port 22 not allowed"},
		{"git.example.org", 22, ok},
		{"git.example.org", 443, "port 443 not allowed"},
		{"mixed.case.test", 443, ok},
		{"dot.test", 443, ok},
		{"dot.test.", 80, ok},
		{"api.test", 443, ok},
		{"api.test", 8443, ok},
		{"api.test", 8080, "port 8080 not allowed"},
		{"127.0.0.1", 443, "IP literals are not allowed; use a host name"},
		{"::1", 443, "IP literals are not allowed; use a host name"},
		{"127.1", 443, "IP literals are not allowed; use a host name"},
		{"registry.npmjs.\u212aorg", 443, "invalid host name"}, // Kelvin sign lower-cases to "k"
		{"exämple.com", 443, "invalid host name"},
		{"a_b.example.com", 443, "invalid host name"},
		{"", 443, "invalid host name"},
	} {
		host, reason := normHost(tc.host)
		if reason == "" {
			reason = p.check(host, tc.port)
		}
		if reason != tc.want {
			t.Errorf("%s:%d: got %q, want %q", tc.host, tc.port, reason, tc.want)
		}
	}
}

func TestForbidden(t *testing.T) {
	for _, tc := range []struct {
		addr string
		why  string // "" allowed
	}{
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "this network"},
		{"10.0.0.1", "private"},
		{"10.255.255.255", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.254", "private"},
		{"192.168.1.1", "private"},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"169.254.169.254", "metadata"},
		{"169.254.1.1", "link-local"},
		{"100.64.0.1", "CGNAT"},
		{"100.127.255.255", "CGNAT"},
		{"192.0.0.8", "IETF protocol assignments"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"203.0.113.80", ""}, // documentation: refused only when it is this host's (isLocal)
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "broadcast"},
		{"::", "unspecified"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:10.0.0.1", "private"},
		{"::ffff:169.254.169.254", "metadata"},
		{"::10.0.0.1", "IPv4-compatible"},
		{"fd00:ec2::254", "metadata"},
		{"fc00::1", "private"},
		{"fd12:3456::1", "private"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"fec0::1", "site-local"},
		{"ff02::1", "multicast"},
		{"64:ff9b::a00:1", "NAT64 of private"},             // 10.0.0.1
		{"64:ff9b::a9fe:a9fe", "NAT64 of metadata"},        // 169.254.169.254
		{"64:ff9b::7f00:1", "NAT64 of loopback"},           // 127.0.0.1
		{"64:ff9b:1::1", "NAT64 local-use"},                //
		{"2002:a00:1::1", "6to4 of private"},               // 10.0.0.1
		{"2002:a9fe:a9fe::1", "6to4 of metadata"},          // 169.254.169.254
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"}, //
		{"100::1", "discard-only"},                         //
		{"8.8.8.8", ""},                                    // public: values only, never dialed
		{"1.1.1.1", ""},                                    //
		{"100.128.0.1", ""},                                // just past CGNAT
		{"172.32.0.1", ""},                                 // just past 172.16/12
		{"198.20.0.1", ""},                                 // just past 198.18/15
		{"::ffff:8.8.8.8", ""},                             //
		{"2606:4700::1111", ""},                            //
		{"2a00:1450:4001::1", ""},                          //
		{"64:ff9b::808:808", ""},                           // NAT64 of 8.8.8.8
		{"2002:808:808::1", ""},                            // 6to4 of 8.8.8.8
	} {
		a := netip.MustParseAddr(tc.addr)
		if got := classify(a); got != tc.why {
			t.Errorf("classify(%s) = %q, want %q", a, got, tc.why)
		}
		if got := Forbidden(a); got != (tc.why != "") {
			t.Errorf("Forbidden(%s) = %v", a, got)
		}
	}
	if !Forbidden(netip.Addr{}) {
		t.Error("the zero Addr must be forbidden")
	}
}

// The host's own addresses are refused whatever their range (here the
// host may sit on a documentation or public address).
func TestRefusedHostAddresses(t *testing.T) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ia := range addrs {
		ipn, ok := ia.(*net.IPNet)
		if !ok {
			continue
		}
		a, _ := netip.AddrFromSlice(ipn.IP)
		n++
		if !refused(a) {
			t.Errorf("this host's address %s is not refused", a)
		}
		if !isLocal(a) {
			t.Errorf("isLocal(%s) = false", a)
		}
	}
	if n == 0 {
		t.Fatal("no interface addresses")
	}
	if refused(netip.MustParseAddr("8.8.8.8")) {
		t.Error("8.8.8.8 refused")
	}
}
