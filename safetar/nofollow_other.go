//go:build !unix

package safetar

// oNoFollow is not available here; os.Root still confines every open.
const oNoFollow = 0
