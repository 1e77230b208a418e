package store

import "errors"

// ErrSchemaTooNew: the database was migrated by a newer sandbox-agent
// than this one. Open refuses it rather than run an older binary against
// tables it does not know (there are no down migrations).
var ErrSchemaTooNew = errors.New("store: database schema is newer than this binary")
