package kit

import (
	"encoding/json"
	"fmt"
	"strings"
)

// BridgeDone recognises an in-sandbox bridge's answer to a warm command
// (the opencode and codex bridges): the line {"type": want}, an error
// when it says {"ok": false}.
func BridgeDone(bridge, want string) func(line []byte) (bool, error) {
	return func(line []byte) (bool, error) {
		var r struct {
			Type string
			OK   *bool
		}
		if json.Unmarshal(line, &r) != nil || r.Type != want {
			return false, nil
		}
		if r.OK != nil && !*r.OK {
			return false, fmt.Errorf("the %s bridge could not %s", bridge, strings.TrimSuffix(want, "_done"))
		}
		return true, nil
	}
}
