package state

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
)

// KeySize is the length of an encryption key: AES-256.
const KeySize = 32

// sealMagic starts every sealed value, so one is never taken for plain text.
var sealMagic = []byte("opke-sealed-v1:")

type sealer struct{ aead cipher.AEAD }

func newSealer(key []byte) (*sealer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("encryption key: %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("encryption key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("encryption key: %w", err)
	}
	return &sealer{aead: aead}, nil
}

// seal encrypts value, bound to key by the additional data.
func (s *sealer) seal(key string, value []byte) ([]byte, error) {
	if s == nil {
		return nil, fmt.Errorf("seal %s: %w", key, ErrSealed)
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal %s: %w", key, err)
	}
	out := append(append(append([]byte{}, sealMagic...), nonce...), s.aead.Seal(nil, nonce, value, []byte(key))...)
	return out, nil
}

func (s *sealer) open(key string, sealed []byte) ([]byte, error) {
	if !bytes.HasPrefix(sealed, sealMagic) {
		return nil, fmt.Errorf("open %s: not a sealed value: %w", key, ErrSealed)
	}
	if s == nil {
		return nil, fmt.Errorf("open %s: %w", key, ErrSealed)
	}
	body := sealed[len(sealMagic):]
	if len(body) < s.aead.NonceSize() {
		return nil, fmt.Errorf("open %s: truncated: %w", key, ErrSealed)
	}
	plain, err := s.aead.Open(nil, body[:s.aead.NonceSize()], body[s.aead.NonceSize():], []byte(key))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", key, ErrSealed)
	}
	return plain, nil
}

// ReadKeyFile reads an encryption key file: 32 raw bytes, or 64 hex digits.
func ReadKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("encryption key file: %w", err)
	}
	if len(b) == KeySize {
		return b, nil
	}
	hexKey := bytes.TrimSpace(b)
	key := make([]byte, KeySize)
	if n, err := fmt.Sscanf(string(hexKey), "%x", &key); n != 1 || err != nil || len(hexKey) != 2*KeySize {
		return nil, fmt.Errorf("encryption key file %s: want %d raw bytes or %d hex digits", path, KeySize, 2*KeySize)
	}
	return key, nil
}

// EnsureKeyFile returns the key in path, creating a random one (0600)
// when the file does not exist, as the simulator demo does.
func EnsureKeyFile(path string) ([]byte, error) {
	key, err := ReadKeyFile(path)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return key, err
	}
	key = make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate encryption key: %w", err)
	}
	if err := os.WriteFile(path, []byte(fmt.Sprintf("%x\n", key)), 0o600); err != nil {
		return nil, fmt.Errorf("write encryption key: %w", err)
	}
	return key, nil
}

// newInstallationID is 16 random bytes in hex: short enough for a tag.
func newInstallationID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand does not fail on Linux
	return fmt.Sprintf("%x", b)
}

// SealBlob encrypts data with the store's encryption key, bound to label:
// OPKE's own snapshots are sealed so before they leave for Swift.
func (s *Store) SealBlob(label string, data []byte) ([]byte, error) { return s.seal.seal(label, data) }

// OpenBlob decrypts what SealBlob sealed under label.
func (s *Store) OpenBlob(label string, sealed []byte) ([]byte, error) {
	return s.seal.open(label, sealed)
}
