package server

import _ "embed"

// openAPIJSON is the OpenAPI 3.1 document of the API, served at
// GET /v1/openapi.json. docs/api-http.md is generated from it (see
// openapi_test.go) and tests check it against routePatterns.
//
//go:embed openapi.json
var openAPIJSON []byte

// OpenAPI returns a copy of the API's OpenAPI 3.1 document (JSON).
func OpenAPI() []byte {
	return append([]byte(nil), openAPIJSON...)
}
