package diff

import (
	"fmt"
	"slices"
)

//go:generate go tool stringer -type=Action -linecomment

// Action is what a change does. The set is closed: the applier and the
// printers switch on it, and a test fails when a switch misses one.
type Action int

// The actions, in the order the summary counts them.
const (
	ActionCreate  Action = iota + 1 // create
	ActionUpdate                    // update
	ActionReplace                   // replace
	ActionDelete                    // delete
	ActionUpload                    // upload
	ActionRestart                   // restart
	ActionBackup                    // backup
	ActionForget                    // forget
	ActionDrain                     // drain
	ActionCheck                     // check
	ActionApply                     // apply
)

// allActions lists every action.
var allActions = []Action{ActionCreate, ActionUpdate, ActionReplace, ActionDelete, ActionUpload, ActionRestart, ActionBackup, ActionForget, ActionDrain, ActionCheck, ActionApply}

// Actions returns a copy of allActions: no caller can rewrite the package's own.
func Actions() []Action {
	return slices.Clone(allActions)
}

// MarshalText writes the action's name.
func (a Action) MarshalText() ([]byte, error) {
	if a < ActionCreate || a > allActions[len(allActions)-1] {
		return nil, fmt.Errorf("action %d: %w", int(a), errUnknownAction)
	}
	return []byte(a.String()), nil
}

// UnmarshalText reads an action's name.
func (a *Action) UnmarshalText(b []byte) error {
	for _, x := range allActions {
		if x.String() == string(b) {
			*a = x
			return nil
		}
	}
	return fmt.Errorf("action %q: %w", b, errUnknownAction)
}
