// Package protocol defines the wire protocol between the krunbox host and
// the guest agent: framing, message types and version negotiation.
package protocol
