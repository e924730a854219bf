package report

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
)

// NoteWriter is where notes go, by notes ref: [source.Mirror] pushes them
// to the fleet's remote.
type NoteWriter interface {
	Note(ref, commit string) ([]byte, error)
	AddNotes(ctx context.Context, commit string, bodies map[string][]byte) error
}

// The git notes refs of the notes: TextRef their text (Text), the one
// `git log --notes=opke` shows, RecordRef the full record (the Note's
// JSON), which `git notes --ref=opke-record show COMMIT` shows.
const (
	TextRef   = "refs/notes/opke"
	RecordRef = "refs/notes/opke-record"
)

// Notes reports as git notes, two per commit, replaced as the commit's
// state moves on: its text for people under refs/notes/opke (Text), and
// the Note's JSON, the full record, under refs/notes/opke-record. An
// unchanged note is not written again.
type Notes struct{ Git NoteWriter }

// Report implements Reporter.
func (r Notes) Report(ctx context.Context, n *Note) error {
	record, err := json.MarshalIndent(n, "", "  ")
	if err != nil {
		return fmt.Errorf("note of %s: %w", n.Commit, err)
	}
	bodies := map[string][]byte{TextRef: []byte(Text(n)), RecordRef: append(record, '\n')}
	same := true
	for ref, body := range bodies {
		if old, err := r.Git.Note(ref, n.Commit); err != nil || !bytes.Equal(old, body) {
			same = false
		}
	}
	if same {
		return nil
	}
	if err := r.Git.AddNotes(ctx, n.Commit, bodies); err != nil {
		return fmt.Errorf("note of %s: %w", n.Commit, err)
	}
	return nil
}
