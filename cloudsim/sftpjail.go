package cloudsim

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/pkg/sftp"
)

// jail serves SFTP inside one host's root through os.Root: no path, ".."
// or symbolic link reaches outside it. SFTP runs as core, as sshd's
// sftp-server does: it writes core's home and the temporary folders only,
// and reads what core may (hostexec.go). Renames replace their target, as
// posix-rename@openssh.com does, so uploads can be atomic.
type jail struct {
	root *os.Root
	h    *simHost
}

func jailHandlers(h *simHost) sftp.Handlers {
	j := &jail{root: h.root, h: h}
	return sftp.Handlers{FileGet: j, FilePut: j, FileCmd: j, FileList: j}
}

// check refuses what core may not do to p.
func (j *jail) check(p string, write bool) error {
	if write && !writable(p, false) || !write && !j.h.readable(p, false) {
		return os.ErrPermission
	}
	return nil
}

// Fileread implements sftp.FileReader.
func (j *jail) Fileread(r *sftp.Request) (io.ReaderAt, error) {
	if err := j.check(rel(r.Filepath), false); err != nil {
		return nil, err
	}
	return j.root.Open(rel(r.Filepath))
}

// Filewrite implements sftp.FileWriter: the file is created with the mode
// the client asked for, before any byte is written.
func (j *jail) Filewrite(r *sftp.Request) (io.WriterAt, error) {
	flags := r.Pflags()
	mode := os.FileMode(0o644)
	if r.AttrFlags().Permissions {
		mode = r.Attributes().FileMode().Perm()
	}
	of := os.O_WRONLY
	if flags.Creat {
		of |= os.O_CREATE
	}
	if flags.Trunc {
		of |= os.O_TRUNC
	}
	if flags.Excl {
		of |= os.O_EXCL
	}
	if flags.Append {
		of |= os.O_APPEND
	}
	if flags.Read {
		of = of&^os.O_WRONLY | os.O_RDWR
	}
	if err := j.check(rel(r.Filepath), true); err != nil {
		return nil, err
	}
	return j.root.OpenFile(rel(r.Filepath), of, mode)
}

// Filecmd implements sftp.FileCmder.
func (j *jail) Filecmd(r *sftp.Request) error {
	p := rel(r.Filepath)
	if err := j.check(p, true); err != nil && r.Method != "Symlink" { // a link's target is only its content
		return err
	}
	if r.Target != "" {
		if err := j.check(rel(r.Target), true); err != nil {
			return err
		}
	}
	switch r.Method {
	case "Setstat":
		a := r.Attributes()
		if r.AttrFlags().Permissions {
			if err := j.root.Chmod(p, a.FileMode().Perm()); err != nil {
				return err
			}
		}
		if r.AttrFlags().Size {
			f, err := j.root.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(int64(a.Size))
		}
		return nil
	case "Rename", "PosixRename":
		return j.root.Rename(p, rel(r.Target))
	case "Rmdir", "Remove":
		return j.root.Remove(p)
	case "Mkdir":
		return j.root.Mkdir(p, 0o755)
	case "Symlink":
		// r.Filepath is the target, r.Target the link (as pkg/sftp passes them).
		return j.root.Symlink(r.Filepath, rel(r.Target))
	case "Link":
		return j.root.Link(p, rel(r.Target))
	}
	return sftp.ErrSSHFxOpUnsupported
}

// PosixRename implements sftp.PosixRenameFileCmder.
func (j *jail) PosixRename(r *sftp.Request) error {
	if err := errors.Join(j.check(rel(r.Filepath), true), j.check(rel(r.Target), true)); err != nil {
		return os.ErrPermission
	}
	return j.root.Rename(rel(r.Filepath), rel(r.Target))
}

// Filelist implements sftp.FileLister.
func (j *jail) Filelist(r *sftp.Request) (sftp.ListerAt, error) {
	p := rel(r.Filepath)
	switch r.Method {
	case "List":
		entries, err := fs.ReadDir(j.root.FS(), p)
		if err != nil {
			return nil, err
		}
		infos := make([]os.FileInfo, 0, len(entries))
		for _, e := range entries {
			if info, err := e.Info(); err == nil {
				infos = append(infos, info)
			}
		}
		return listerAt(infos), nil
	case "Stat":
		info, err := j.root.Stat(p)
		if err != nil {
			return nil, err
		}
		return listerAt{info}, nil
	case "Readlink":
		target, err := j.root.Readlink(p)
		if err != nil {
			return nil, err
		}
		return listerAt{linkInfo(target)}, nil
	}
	return nil, sftp.ErrSSHFxOpUnsupported
}

// Lstat implements sftp.LstatFileLister (Lstat requests come here, not
// to Filelist).
func (j *jail) Lstat(r *sftp.Request) (sftp.ListerAt, error) {
	info, err := j.root.Lstat(rel(r.Filepath))
	if err != nil {
		return nil, err
	}
	return listerAt{info}, nil
}

// RealPath implements sftp.RealPathFileLister: paths are the host's.
func (j *jail) RealPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		p = "/home/core/" + p
	}
	return path.Clean(p), nil
}

type listerAt []os.FileInfo

func (l listerAt) ListAt(dst []os.FileInfo, offset int64) (int, error) {
	if offset >= int64(len(l)) {
		return 0, io.EOF
	}
	n := copy(dst, l[offset:])
	if n < len(dst) || offset+int64(n) == int64(len(l)) {
		return n, io.EOF
	}
	return n, nil
}

// linkInfo carries a symlink's target as a name, which pkg/sftp returns
// for Readlink.
type linkInfo string

func (l linkInfo) Name() string       { return string(l) }
func (l linkInfo) Size() int64        { return 0 }
func (l linkInfo) Mode() fs.FileMode  { return fs.ModeSymlink }
func (l linkInfo) ModTime() time.Time { return time.Time{} }
func (l linkInfo) IsDir() bool        { return false }
func (l linkInfo) Sys() any           { return nil }
