package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// stateHead holds the raw top-level members the store reads of a TF
// state: those that tell a state from other bytes and that the guards
// compare.
type stateHead struct {
	version, serial, lineage, encryptionVersion, encryptedData []byte
}

// ParseState checks that body is a TF state the store may keep and
// returns its serial and lineage. Two shapes are accepted:
//
//   - a plain state (tofu or terraform): a JSON object with an integer
//     version, an integer serial of 0 or more and a non-empty lineage;
//   - OpenTofu's encrypted state: a JSON object with a non-empty
//     encryption_version, encrypted_data as a string, and serial and
//     lineage in clear text as above.
//
// The whole body must be valid JSON. Members are matched as Go's
// encoding/json, which tofu and terraform read states with, matches them:
// case-insensitively, the last of duplicates winning; so the store
// reads the serial and lineage they will. The error says what is wrong.
func ParseState(body []byte) (serial uint64, lineage string, err error) {
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		if !json.Valid(body) {
			return 0, "", errors.New("the body is not JSON")
		}
		return 0, "", errors.New("the body is JSON but not an object")
	}
	h, err := readStateHead(body)
	if err != nil {
		return 0, "", err
	}
	if h.encryptionVersion != nil && string(h.encryptionVersion) != "null" {
		var v string
		if json.Unmarshal(h.encryptionVersion, &v) != nil || v == "" {
			return 0, "", errors.New("encryption_version must be a non-empty string")
		}
		if len(h.encryptedData) == 0 || h.encryptedData[0] != '"' {
			return 0, "", errors.New("an encrypted state needs encrypted_data as a string")
		}
	} else if _, err := wholeNumber(h.version, "version"); err != nil {
		return 0, "", err
	}
	if serial, err = wholeNumber(h.serial, "serial"); err != nil {
		return 0, "", err
	}
	if json.Unmarshal(h.lineage, &lineage) != nil || lineage == "" {
		return 0, "", errors.New("lineage must be a non-empty string")
	}
	return serial, lineage, nil
}

// readStateHead decodes the top-level members ParseState reads, as
// encoding/json matches them. The other members, a large state's
// resources among them, are only scanned; encrypted_data is kept as a
// view of its first byte, so a large encrypted state is not copied.
func readStateHead(body []byte) (stateHead, error) {
	var raw struct {
		Version           json.RawMessage `json:"version"`
		Serial            json.RawMessage `json:"serial"`
		Lineage           json.RawMessage `json:"lineage"`
		EncryptionVersion json.RawMessage `json:"encryption_version"`
		EncryptedData     firstByte       `json:"encrypted_data"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return stateHead{}, fmt.Errorf("the body is not valid JSON at byte %d: %v", se.Offset, se)
		}
		return stateHead{}, fmt.Errorf("the body's members cannot be read: %v", err)
	}
	h := stateHead{version: raw.Version, serial: raw.Serial, lineage: raw.Lineage, encryptionVersion: raw.EncryptionVersion}
	if raw.EncryptedData != 0 {
		h.encryptedData = []byte{byte(raw.EncryptedData)}
	}
	return h, nil
}

// firstByte keeps only the first byte of a JSON value: enough to tell a
// string ('"') from anything else without copying the value.
type firstByte byte

func (f *firstByte) UnmarshalJSON(b []byte) error {
	if len(b) > 0 {
		*f = firstByte(b[0])
	}
	return nil
}

// wholeNumber reads a JSON integer of 0 or more.
func wholeNumber(raw []byte, what string) (uint64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, fmt.Errorf("it has no %s", what)
	}
	n, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %s is not a whole number", what, raw)
	}
	return n, nil
}
