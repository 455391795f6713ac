"""Checks on a client's SDP offer before aiortc applies it.

aiortc trusts the offer's structure: a media section of another kind (``m=text``) or a ``BUNDLE`` group whose
first mid names no audio, video or application section leaves transceivers without a transport, and then
``RTCPeerConnection.close()`` itself raises (the session stayed ``closing`` for good). Each audio or video
section costs a transport with its own sockets, so their number is capped too. :func:`check_offer` refuses such
offers with :class:`InvalidRequest` (code ``invalid_sdp``, HTTP 400) and strips remote candidates the server
must not probe (see :mod:`rtc_agent.rtc.candidates`).

It also parses the offer as ``setRemoteDescription`` does and checks what aiortc would refuse there (ICE
credentials, RTCP mux, a codec in common), so that an offer it passes is one aiortc takes: checked before a
session exists, a malformed offer costs nothing (a client token is used only by an offer that passed).
"""

from __future__ import annotations

import re

from aiortc import sdp as aiortc_sdp
from aiortc.codecs import CODECS

from rtc_agent.errors import InvalidRequest
from rtc_agent.rtc.candidates import MAX_MEDIA_SECTIONS, CandidateFilter

KINDS = frozenset({"audio", "video", "application"})
#: the codecs aiortc negotiates per kind (retransmission is no codec of its own)
_CODECS = {kind: frozenset(c.mimeType.lower() for c in codecs if not c.mimeType.lower().endswith("/rtx"))
           for kind, codecs in CODECS.items()}
_MLINE = re.compile(r"m=([A-Za-z0-9_-]{1,32}) ([0-9]{1,5})(?:/[0-9]{1,3})? ([A-Za-z0-9/_.-]{1,64})( \S+)+")


def _invalid(message: str) -> InvalidRequest:
    return InvalidRequest(message, code="invalid_sdp")


def check_offer(sdp: str, candidates: CandidateFilter, *, max_candidates: int) -> str:
    """The offer to apply: structure checked, forbidden candidates removed. Raises :class:`InvalidRequest`
    (``invalid_sdp``, ``invalid_candidate`` or ``too_many_candidates``)."""
    if not sdp.lstrip().startswith("v=0"):
        raise _invalid("the offer is not an SDP session description (it must start with v=0)")
    lines = [line.strip() for line in sdp.splitlines()]
    sections: list[tuple[str, str | None]] = []  # (kind, mid)
    bundles: list[list[str]] = []
    fingerprinted: list[bool] = []  # per section: has its own a=fingerprint
    session_fingerprint = False
    for line in lines:
        if line.startswith("m="):
            match = _MLINE.fullmatch(line)
            if match is None:
                raise _invalid(f"malformed media line {line[:80]!r}")
            kind = match.group(1)
            if kind not in KINDS:
                raise _invalid(f"media sections of kind {kind!r} are not supported (audio, video and "
                               "application only)")
            sections.append((kind, None))
            fingerprinted.append(False)
            if len(sections) > MAX_MEDIA_SECTIONS:
                raise _invalid(f"the offer has more than {MAX_MEDIA_SECTIONS} media sections")
        elif line.startswith("a=mid:") and sections:
            kind, mid = sections[-1]
            if mid is not None:
                raise _invalid("a media section has two a=mid lines")
            sections[-1] = (kind, line[6:])
        elif line.startswith("a=group:BUNDLE"):
            bundles.append(line[len("a=group:BUNDLE"):].split())
        elif line.startswith("a=fingerprint:") and len(line.split()) == 2:
            if sections:
                fingerprinted[-1] = True
            else:
                session_fingerprint = True
    if not sections:
        raise _invalid("the offer has no media sections (m= lines)")
    if not session_fingerprint and not all(fingerprinted):
        # aiortc would accept it and then fail an assertion in its connect task: the session could never connect
        raise _invalid("a media section has no DTLS fingerprint (a=fingerprint:<algorithm> <value>)")
    mids = [mid for _, mid in sections if mid is not None]
    if len(set(mids)) != len(mids):
        raise _invalid("two media sections share one mid")
    if sum(1 for kind, _ in sections if kind == "application") > 1:
        raise _invalid("the offer has more than one application (data channel) section")
    for group in bundles:
        unknown = [mid for mid in group if mid not in mids]
        if unknown:
            raise _invalid(f"the BUNDLE group names mids with no media section: {unknown[:4]}")
    cleaned = candidates.filter_sdp(sdp, limit=max_candidates)
    _check_parsed(cleaned)
    return cleaned


def _check_parsed(sdp: str) -> None:
    """What ``RTCPeerConnection.setRemoteDescription`` refuses in an offer, found without a connection."""
    try:
        description = aiortc_sdp.SessionDescription.parse(sdp)
    except Exception as exc:  # the parser raises whatever a bad line makes it raise
        raise _invalid(f"the offer could not be parsed: {exc!r}"[:200]) from None
    for media in description.media:
        if not media.ice.usernameFragment or not media.ice.password:
            raise _invalid("a media section has no ICE credentials (a=ice-ufrag and a=ice-pwd)")
        if media.kind in _CODECS:
            if not media.rtcp_mux:
                raise _invalid(f"the {media.kind} section does not use RTCP mux (a=rtcp-mux)")
            if not any(codec.mimeType.lower() in _CODECS[media.kind] for codec in media.rtp.codecs):
                raise _invalid(f"the {media.kind} section offers no codec the server supports "
                               f"({', '.join(sorted(_CODECS[media.kind]))})")
