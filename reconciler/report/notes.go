package report

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
)

// NoteWriter is where notes go: [source.Mirror] pushes them to the
// fleet's remote.
type NoteWriter interface {
	Note(commit string) ([]byte, error)
	AddNote(ctx context.Context, commit string, body []byte) error
}

// Notes reports as git notes: one per commit under refs/notes/opke, the
// Note's JSON, replaced as the commit's state moves on. An unchanged note
// is not written again.
type Notes struct{ Git NoteWriter }

// Report implements Reporter.
func (r Notes) Report(ctx context.Context, n *Note) error {
	body, err := json.MarshalIndent(n, "", "  ")
	if err != nil {
		return fmt.Errorf("note of %s: %w", n.Commit, err)
	}
	body = append(body, '\n')
	if old, err := r.Git.Note(n.Commit); err == nil && bytes.Equal(old, body) {
		return nil
	}
	if err := r.Git.AddNote(ctx, n.Commit, body); err != nil {
		return fmt.Errorf("note of %s: %w", n.Commit, err)
	}
	return nil
}
