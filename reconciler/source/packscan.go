package source

import (
	"bufio"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A pack's compressed size says little of what it holds: a blob of 99 MiB
// of zeros travels in about 100 KiB, and go-git inflates each object it
// indexes into memory. So a fetched pack is read as it arrives, before
// go-git gets any of it (packBound), and refused at the first object over
// its bounds: the size each object's header declares (a delta's, the size
// of the object it makes), what each one truly inflates to, and the sum
// of those over the pack.

// PackLimits bound what one fetched pack may hold once inflated.
type PackLimits struct {
	// MaxObject bounds each object: a commit, tree, blob or tag, a
	// delta's instructions, and the object a delta makes from its base.
	MaxObject int64
	// MaxTotal, if not 0, bounds the pack's whole cost: what its objects
	// inflate to (a delta's instructions and the object it makes), and
	// objectCost for each object, so that neither many empty objects nor
	// deltas of large instructions and small results get round it. A
	// pull request's fetch has it; the tracked branch's does not (its
	// history, notes included, is as long as the fleet's life).
	MaxTotal int64
}

// objectCost is what each object of a pack counts for besides its
// bytes: what go-git's parser and index keep of it, with room to spare.
const objectCost = 1 << 10

// The default bounds: a fleet repository holds specs of a few KiB each.
const (
	DefaultMaxObjectBytes   = 32 << 20
	DefaultMaxInflatedBytes = 256 << 20
)

// ErrPackTooLarge is a pack whose objects, inflated, are over a bound.
var ErrPackTooLarge = errors.New("the fetch holds more than its limit once inflated")

// The object types of a pack (gitformat-pack).
const (
	objCommit   = 1
	objTree     = 2
	objBlob     = 3
	objTag      = 4
	objOfsDelta = 6
	objRefDelta = 7
)

var typeNames = map[byte]string{objCommit: "commit", objTree: "tree", objBlob: "blob", objTag: "tag", objOfsDelta: "delta", objRefDelta: "delta"}

// ScanPack reads a version 2 or 3 pack (SHA-1) from r and checks every
// object against lim. It returns an error wrapping ErrPackTooLarge for
// an object over a bound, another error for a pack it cannot read, and
// nil at the pack's end (its trailer is not checked: go-git checks it).
func ScanPack(r io.Reader, lim PackLimits) error {
	br := bufio.NewReader(r)
	var head [12]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		return fmt.Errorf("pack header: %w", err)
	}
	if string(head[:4]) != "PACK" {
		return errors.New("not a pack")
	}
	if v := binary.BigEndian.Uint32(head[4:8]); v != 2 && v != 3 {
		return fmt.Errorf("pack version %d", v)
	}
	count := binary.BigEndian.Uint32(head[8:12])
	if lim.MaxTotal > 0 && int64(count)*objectCost > lim.MaxTotal {
		return fmt.Errorf("%w: it holds %d objects, over the %d its bound of %s allows", ErrPackTooLarge, count, lim.MaxTotal/objectCost, mib(lim.MaxTotal))
	}
	var total int64
	for i := range count {
		typ, size, err := objectHeader(br)
		if err != nil {
			return fmt.Errorf("object %d of %d: %w", i+1, count, err)
		}
		name, ok := typeNames[typ]
		if !ok {
			return fmt.Errorf("object %d of %d: type %d", i+1, count, typ)
		}
		switch typ {
		case objOfsDelta:
			if err := skipOffset(br); err != nil {
				return fmt.Errorf("object %d of %d: %w", i+1, count, err)
			}
		case objRefDelta:
			if _, err := br.Discard(20); err != nil {
				return fmt.Errorf("object %d of %d: %w", i+1, count, err)
			}
		}
		made, err := inflate(br, typ, size, lim.MaxObject)
		if err != nil {
			return fmt.Errorf("object %d of %d (a %s): %w", i+1, count, name, err)
		}
		if typ == objOfsDelta || typ == objRefDelta {
			made += size // its instructions, inflated too
		}
		if total += made + objectCost; lim.MaxTotal > 0 && total > lim.MaxTotal {
			return fmt.Errorf("%w: its objects make more than %s (at object %d of %d)", ErrPackTooLarge, mib(lim.MaxTotal), i+1, count)
		}
	}
	return nil
}

// objectHeader reads an object's type and the size its header declares
// (a delta's: the size of its instructions).
func objectHeader(br *bufio.Reader) (byte, int64, error) {
	b, err := br.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	typ := (b >> 4) & 7
	size := int64(b & 15)
	for shift := 4; b&0x80 != 0; shift += 7 {
		if shift > 56 {
			return 0, 0, errors.New("its size does not fit 60 bits")
		}
		if b, err = br.ReadByte(); err != nil {
			return 0, 0, err
		}
		size |= int64(b&0x7f) << shift
	}
	return typ, size, nil // at most 60 bits: never negative
}

// skipOffset reads an offset delta's base offset (its own varint form).
func skipOffset(br *bufio.Reader) error {
	for n := 0; ; n++ {
		if n > 9 {
			return errors.New("its base offset does not fit 64 bits")
		}
		b, err := br.ReadByte()
		if err != nil {
			return err
		}
		if b&0x80 == 0 {
			return nil
		}
	}
}

// inflate reads one object's zlib stream, no byte past its end (br is a
// ByteReader, which flate reads exactly), and returns the size of the
// object it makes: a whole object's inflated size, a delta's target size.
// Neither may be over max, nor a delta's instructions; an object whose
// stream inflates to another size than its header declares is refused.
func inflate(br *bufio.Reader, typ byte, declared, max int64) (int64, error) {
	if declared > max {
		return 0, fmt.Errorf("%w: it declares %s, over %s", ErrPackTooLarge, mib(declared), mib(max))
	}
	z, err := zlib.NewReader(br)
	if err != nil {
		return 0, err
	}
	defer z.Close()
	cr := &countReader{r: z}
	src := bufio.NewReaderSize(io.LimitReader(cr, declared+1), 64)
	made := declared
	if typ == objOfsDelta || typ == objRefDelta {
		// The delta's base size, then its target's.
		if _, err := binary.ReadUvarint(src); err != nil {
			return 0, fmt.Errorf("its base size: %w", err)
		}
		target, err := binary.ReadUvarint(src)
		if err != nil {
			return 0, fmt.Errorf("its target size: %w", err)
		}
		if target > uint64(max) {
			return 0, fmt.Errorf("%w: it makes an object of %s, over %s", ErrPackTooLarge, mib(int64(target)), mib(max))
		}
		made = int64(target)
	}
	if _, err := io.Copy(io.Discard, src); err != nil {
		return 0, err
	}
	switch {
	case cr.n > declared:
		return 0, fmt.Errorf("%w: it inflates past the %d bytes it declares", ErrPackTooLarge, declared)
	case cr.n < declared:
		return 0, fmt.Errorf("it inflates to %d bytes, not the %d it declares", cr.n, declared)
	}
	// The stream's end, and its checksum.
	if _, err := z.Read(make([]byte, 1)); err != io.EOF {
		return 0, fmt.Errorf("its stream does not end where its size says (%v)", err)
	}
	return made, nil
}

// countReader counts what is read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// mib is a byte count for a message, in MiB (KiB below one MiB).
func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}

// packGate reads a fetched pack with ScanPack as it arrives, and lets a
// chunk of it through to go-git only once the scan has read all of it: no
// object over the bounds reaches go-git's indexer, which inflates what it
// is given (an object's inflated bytes may run ahead of the scan by at
// most flate's window, 32 KiB).
type packGate struct {
	in   chan []byte
	need chan struct{}
	stop chan struct{}
	done chan error
	// ended: the scan returned, with err.
	ended bool
	err   error
}

func newPackGate(lim PackLimits) *packGate {
	g := &packGate{in: make(chan []byte), need: make(chan struct{}), stop: make(chan struct{}), done: make(chan error, 1)}
	go func() { g.done <- ScanPack(&gateReader{g: g}, lim) }()
	return g
}

// check gives p to the scan and returns once the scan has read all of it
// (it asks for more), or has ended: the scan's error, if it ended on one.
func (g *packGate) check(p []byte) error {
	if g.ended {
		return g.err
	}
	select {
	case g.in <- p:
	case err := <-g.done:
		g.end(err)
		return g.err
	}
	select {
	case <-g.need:
		return nil
	case err := <-g.done:
		g.end(err)
		return g.err
	}
}

func (g *packGate) end(err error) {
	g.ended, g.err = true, err
}

// close ends the scan (a pack cut short ends it on a read error) and
// waits for it.
func (g *packGate) close() {
	close(g.stop)
	if !g.ended {
		g.end(<-g.done)
	}
}

// gateReader is the scan's side of a packGate.
type gateReader struct {
	g   *packGate
	cur []byte
	had bool
}

func (r *gateReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.had {
			// All of the last chunk read: check may let it through.
			select {
			case r.g.need <- struct{}{}:
			case <-r.g.stop:
				return 0, io.ErrUnexpectedEOF
			}
		}
		select {
		case r.cur = <-r.g.in:
			r.had = true
		case <-r.g.stop:
			return 0, io.ErrUnexpectedEOF
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}
