// Package conformance holds the end-to-end behaviours every driver must
// pass, in its real image with the fake model (conformance_integration_test.go,
// build tag integration). A driver that cannot do something does not
// implement the optional interface (or claim the trait) for it, so
// sandboxagent.CapabilitiesOf reports it absent; any other gap fails.
package conformance
