package daemon

import (
	"context"
	"errors"
	"fmt"

	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/reconciler/source"
	"opke.dev/opke/state"
)

// ErrRewritten is a head that does not descend from the last commit
// applied: the tracked branch was force-pushed, to an older commit or to
// another history. Applying it could undo what was applied (a rollback to
// a spec with deletionPolicy: Delete deletes clusters), so only a head the
// operator names (Config.AllowRewrite) is applied.
var ErrRewritten = errors.New("the tracked branch was rewritten")

// maxVerified bounds the commits checked between two heads.
const maxVerified = 10_000

// admit is the commit policy: it returns why commit may not follow base,
// the last head accepted on its ref ("" for none), or the note to put on
// it ("" for nothing to say). The head must descend from base unless the
// operator allowed this very commit; with a keyring, every commit since
// base (the head alone when there is no base) must be signed by one of
// its keys.
func (d *Daemon) admit(ctx context.Context, base, commit string) (string, error) {
	commits, note := []string{commit}, ""
	if base != "" && base != commit {
		since, descends, err := d.cfg.Source.Since(ctx, base, commit, maxVerified)
		switch {
		case err != nil && !errors.Is(err, source.ErrUnknownRevision):
			return "", fmt.Errorf("check the commits since %s: %w", short(base), err)
		case descends:
			commits = since
		case commit != d.cfg.AllowRewrite:
			return "", fmt.Errorf("%w: %s does not descend from %s, the last commit applied; to apply it anyway, restart the daemon with --allow-rewrite %s",
				ErrRewritten, short(commit), short(base), commit)
		default:
			note = fmt.Sprintf("history rewritten: this commit does not descend from %s, the last commit applied; applied because the operator allowed it (--allow-rewrite)", base)
			if err == nil {
				commits = since
			}
		}
	}
	if d.cfg.Keyring != "" {
		for _, c := range commits {
			if err := d.cfg.Source.Verify(c, d.cfg.Keyring); err != nil {
				if c == commit {
					return "", fmt.Errorf("the commit is not signed by a key of the keyring: %w", err)
				}
				return "", fmt.Errorf("commit %s since the last one applied is not signed by a key of the keyring: %w", short(c), err)
			}
		}
	}
	return note, nil
}

func short(commit string) string { return commit[:min(len(commit), 12)] }

// accepted is the last head of ref the policy let through ("" for none):
// the base of the next head's checks, and what the drift checks hold the
// cloud to. A store that does not answer is an error, never "none": the
// policy fails closed.
func (d *Daemon) accepted(ctx context.Context, ref string) (string, error) {
	data, err := d.cfg.Store.Get(ctx, state.KeysOf(d.cfg.Store).Accepted(ref))
	if errors.Is(err, state.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the accepted head of %s: %w", ref, err)
	}
	return string(data), nil
}

// refusedPrefix starts the message of a note whose commit the policy
// refused.
const refusedPrefix = "not applied: "

// refused tells whether a note's commit was kept from being applied as a
// whole: refused by the policy, no readable fleet, an unreadable store
// (a note's Message says only that; a notice is apart).
func refused(n *report.Note) bool { return n.Message != "" }

// dispatched tells whether a note records a commit that was planned or
// applied (some cluster has its plan): a record to keep.
func dispatched(n *report.Note) bool {
	for _, c := range n.Clusters {
		if c.Plan != nil {
			return true
		}
	}
	return false
}

// migrateAccepted records, for a store written before the accepted head
// was, the last head dispatched as accepted when its note shows it was
// not refused; with nothing recorded the next head would be checked
// alone.
func (d *Daemon) migrateAccepted(ctx context.Context, ref string, seen map[string]string) {
	head := seen[ref]
	if head == "" {
		return
	}
	if accepted, err := d.accepted(ctx, ref); err != nil || accepted != "" {
		return
	}
	if n, err := d.Note(ctx, head); err != nil || refused(n) {
		return
	}
	if err := d.write(ctx, state.KeysOf(d.cfg.Store).Accepted(ref), []byte(head)); err != nil {
		d.log.Error("record the accepted head", "err", err)
	}
}
