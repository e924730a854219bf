package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/reconciler/source"
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

func (d *Daemon) acceptedKey(ref string) string { return d.cfg.Store.Key("_daemon", "accepted", ref) }

// accepted is the last head of ref the policy let through ("" for none):
// the base of the next head's checks, and what the drift checks hold the
// cloud to.
func (d *Daemon) accepted(ctx context.Context, ref string) string {
	data, err := d.cfg.Store.Get(ctx, d.acceptedKey(ref))
	if err != nil {
		return ""
	}
	return string(data)
}

// migrateAccepted records, for a store written before the accepted head
// was, the last head dispatched as accepted when its note shows it was
// not refused; with nothing recorded the next head would be checked
// alone.
func (d *Daemon) migrateAccepted(ctx context.Context, ref string, seen map[string]string) {
	head := seen[ref]
	if head == "" || d.accepted(ctx, ref) != "" {
		return
	}
	data, err := d.cfg.Store.Get(ctx, d.cfg.Store.Key("_reports", head))
	if err != nil {
		return
	}
	var n report.Note
	if json.Unmarshal(data, &n) != nil || strings.HasPrefix(n.Message, "not applied") || strings.HasPrefix(n.Message, "no fleet") {
		return
	}
	if err := d.write(ctx, d.acceptedKey(ref), []byte(head)); err != nil {
		d.log.Error("record the accepted head", "err", err)
	}
}
