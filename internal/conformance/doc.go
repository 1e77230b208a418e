// Package conformance holds the end-to-end behaviours every driver must
// pass, in its real image with the fake model (conformance_integration_test.go,
// build tag integration). A driver that cannot do something declares it in
// its Capabilities; an undeclared gap fails.
package conformance
