-- Wireshark / tshark dissector for mrc, the multipath reliable transport (docs/WIRE.md).
--
-- Decodes every mrc packet on UDP port 4792 (mrc's default; Edit > Preferences >
-- Protocols > MRC to change it): the BTH with mrc's flags (AckReq, rtx, ts, trimmed), the
-- MRCETH (EV, MSN, send timestamp, generation), data packets (MSGETH, RETH, ImmDt,
-- payload), SACK, NACK (with reason names), CNP, EV probe and probe reply. With the
-- "authenticated" preference on (mrc-perf --psk-file), the body is shown as encrypted and
-- the trailer as its packet number and AES-256-GCM tag.
--
--   tshark -X lua_script:fabric/wireshark/mrc.lua -r capture.pcap -V
--   wireshark -X lua_script:fabric/wireshark/mrc.lua capture.pcap
--
-- or copy it to ~/.local/lib/wireshark/plugins/ to load it always.

local mrc = Proto("mrc", "mrc multipath reliable transport")

local opcodes = {
    [0x00] = "SEND_FIRST", [0x01] = "SEND_MIDDLE", [0x02] = "SEND_LAST",
    [0x03] = "SEND_LAST_WITH_IMMEDIATE", [0x04] = "SEND_ONLY",
    [0x05] = "SEND_ONLY_WITH_IMMEDIATE", [0x06] = "RDMA_WRITE_FIRST",
    [0x07] = "RDMA_WRITE_MIDDLE", [0x08] = "RDMA_WRITE_LAST",
    [0x09] = "RDMA_WRITE_LAST_WITH_IMMEDIATE", [0x0A] = "RDMA_WRITE_ONLY",
    [0x0B] = "RDMA_WRITE_ONLY_WITH_IMMEDIATE", [0x81] = "CNP", [0xE0] = "SACK",
    [0xE1] = "NACK", [0xE2] = "EV_PROBE", [0xE3] = "EV_PROBE_REPLY",
    [0xE4] = "PORT_STATUS",
}

local nack_reasons = {
    [1] = "TRIMMED", [2] = "TRIMMED_LASTHOP", [3] = "NO_BITMAP", [4] = "NO_PKT_BUFFER",
    [5] = "PSN_OUT_OF_WINDOW", [6] = "ACCESS_ERROR", [7] = "GENERATION_MISMATCH",
    [8] = "RECEIVER_NOT_READY",
}

local f = {
    opcode = ProtoField.uint8("mrc.opcode", "Opcode", base.HEX, opcodes),
    pkey = ProtoField.uint16("mrc.pkey", "P_Key", base.HEX),
    trimmed = ProtoField.bool("mrc.trimmed", "Trimmed", 8, nil, 0x20),
    dest_qpn = ProtoField.uint24("mrc.dest_qpn", "Destination QPN", base.HEX),
    ack_req = ProtoField.bool("mrc.ack_req", "AckReq", 8, nil, 0x80),
    rtx = ProtoField.bool("mrc.rtx", "Retransmission", 8, nil, 0x40),
    ts = ProtoField.bool("mrc.ts", "Timestamp valid", 8, nil, 0x20),
    psn = ProtoField.uint24("mrc.psn", "PSN", base.DEC),
    ev = ProtoField.uint32("mrc.ev", "EV", base.DEC),
    msn = ProtoField.uint32("mrc.msn", "MSN", base.DEC),
    send_ts = ProtoField.uint32("mrc.send_ts", "Send timestamp (ns, low 32 bits)", base.DEC),
    generation = ProtoField.uint16("mrc.generation", "Generation", base.DEC),
    msg_len = ProtoField.uint32("mrc.msg_len", "Message length", base.DEC),
    msg_offset = ProtoField.uint32("mrc.msg_offset", "Offset in message", base.DEC),
    va = ProtoField.uint64("mrc.reth.va", "Virtual address", base.HEX),
    rkey = ProtoField.uint32("mrc.reth.rkey", "rkey", base.HEX),
    dma_len = ProtoField.uint32("mrc.reth.dma_len", "DMA length", base.DEC),
    imm = ProtoField.uint32("mrc.imm", "Immediate data", base.HEX),
    payload = ProtoField.bytes("mrc.payload", "Payload"),
    payload_len = ProtoField.uint32("mrc.payload_len", "Payload length", base.DEC),
    sack_cum = ProtoField.uint24("mrc.sack.cumulative_psn", "Cumulative PSN", base.DEC),
    sack_base = ProtoField.uint24("mrc.sack.bitmap_base_psn", "Bitmap base PSN", base.DEC),
    sack_bitmap = ProtoField.uint64("mrc.sack.bitmap", "Bitmap", base.HEX),
    echo_ev = ProtoField.uint32("mrc.echo_ev", "Echoed EV", base.DEC),
    echo_ts = ProtoField.uint32("mrc.echo_ts", "Echoed send timestamp (ns)", base.DEC),
    ecn_ce = ProtoField.uint16("mrc.sack.ecn_ce_count", "ECN-CE count", base.DEC),
    credit = ProtoField.int16("mrc.sack.credit", "Credit", base.DEC),
    nack_psn = ProtoField.uint24("mrc.nack.psn", "NACKed PSN", base.DEC),
    nack_reason = ProtoField.uint8("mrc.nack.reason", "Reason", base.DEC, nack_reasons),
    probe_seq = ProtoField.uint32("mrc.probe.seq", "Probe sequence", base.DEC),
    psu_seq = ProtoField.uint32("mrc.psu.seq", "Port status sequence", base.DEC),
    psu_up = ProtoField.uint32("mrc.psu.up_planes", "Up planes", base.HEX),
    psu_planes = ProtoField.uint8("mrc.psu.planes", "Planes", base.DEC),
    psu_ack = ProtoField.bool("mrc.psu.ack", "Acknowledgement", 8, nil, 0x80),
    auth_pn = ProtoField.uint64("mrc.auth.packet_number", "Packet number", base.DEC),
    auth_tag = ProtoField.bytes("mrc.auth.tag", "AES-256-GCM tag"),
    encrypted = ProtoField.bytes("mrc.encrypted", "Encrypted body"),
}
mrc.fields = f

local e_short = ProtoExpert.new("mrc.short", "Shorter than its headers",
    expert.group.MALFORMED, expert.severity.ERROR)
mrc.experts = { e_short }

mrc.prefs.port = Pref.uint("UDP port", 4792, "UDP port mrc runs on")
mrc.prefs.authenticated = Pref.bool("Authenticated",
    false, "Datagrams carry the authentication trailer (mrc-perf --psk-file)")

local BTH, MRCETH, TRAILER = 12, 16, 24

local function is_data(op) return op <= 0x0B end
local function is_write(op) return op >= 0x06 and op <= 0x0B end
local function has_imm(op) return op == 0x03 or op == 0x05 or op == 0x09 or op == 0x0B end

function mrc.dissector(buf, pinfo, tree)
    local len = buf:len()
    if len < BTH + MRCETH then
        tree:add_proto_expert_info(e_short)
        return 0
    end
    pinfo.cols.protocol = "MRC"
    local root = tree:add(mrc, buf(), "mrc")
    local op = buf(0, 1):uint()
    local bth = root:add(mrc, buf(0, BTH), "BTH")
    bth:add(f.opcode, buf(0, 1))
    bth:add(f.pkey, buf(2, 2))
    bth:add(f.trimmed, buf(4, 1))
    bth:add(f.dest_qpn, buf(5, 3))
    bth:add(f.ack_req, buf(8, 1))
    bth:add(f.rtx, buf(8, 1))
    bth:add(f.ts, buf(8, 1))
    bth:add(f.psn, buf(9, 3))
    local m = root:add(mrc, buf(BTH, MRCETH), "MRCETH")
    m:add(f.ev, buf(12, 4))
    m:add(f.msn, buf(16, 4))
    m:add(f.send_ts, buf(20, 4))
    m:add(f.generation, buf(24, 2))
    local name = opcodes[op] or string.format("0x%02x", op)
    pinfo.cols.info = string.format("%s QPN 0x%06x PSN %d EV %d", name,
        buf(5, 3):uint(), buf(9, 3):uint(), buf(12, 4):uint())
    local o, last = BTH + MRCETH, len
    if mrc.prefs.authenticated then
        if len < BTH + MRCETH + TRAILER then
            root:add_proto_expert_info(e_short)
            return len
        end
        last = len - TRAILER
        local a = root:add(mrc, buf(last, TRAILER), "Authentication trailer")
        a:add(f.auth_pn, buf(last, 8))
        a:add(f.auth_tag, buf(last + 8, 16))
        if last > o then
            root:add(f.encrypted, buf(o, last - o))
        end
        pinfo.cols.info:append(" (authenticated)")
        return len
    end
    local function need(n)
        if o + n > last then
            root:add_proto_expert_info(e_short)
            return false
        end
        return true
    end
    if is_data(op) then
        if not need(8) then return len end
        local d = root:add(mrc, buf(o, 8), "MSGETH")
        d:add(f.msg_len, buf(o, 4))
        d:add(f.msg_offset, buf(o + 4, 4))
        o = o + 8
        if is_write(op) then
            if not need(16) then return len end
            local r = root:add(mrc, buf(o, 16), "RETH")
            r:add(f.va, buf(o, 8))
            r:add(f.rkey, buf(o + 8, 4))
            r:add(f.dma_len, buf(o + 12, 4))
            o = o + 16
        end
        if has_imm(op) then
            if not need(4) then return len end
            root:add(f.imm, buf(o, 4))
            o = o + 4
        end
        root:add(f.payload_len, last - o)
        if last > o then
            root:add(f.payload, buf(o, last - o))
        end
    elseif op == 0xE0 then
        if not need(28) then return len end
        local s = root:add(mrc, buf(o, 28), "SACK")
        s:add(f.sack_cum, buf(o + 1, 3))
        s:add(f.sack_base, buf(o + 5, 3))
        s:add(f.sack_bitmap, buf(o + 8, 8))
        s:add(f.echo_ev, buf(o + 16, 4))
        s:add(f.echo_ts, buf(o + 20, 4))
        s:add(f.ecn_ce, buf(o + 24, 2))
        s:add(f.credit, buf(o + 26, 2))
    elseif op == 0xE1 then
        if not need(16) then return len end
        local n = root:add(mrc, buf(o, 16), "NACK")
        n:add(f.nack_psn, buf(o + 1, 3))
        n:add(f.nack_reason, buf(o + 4, 1))
        n:add(f.echo_ev, buf(o + 8, 4))
        n:add(f.echo_ts, buf(o + 12, 4))
        local reason = nack_reasons[buf(o + 4, 1):uint()] or "?"
        pinfo.cols.info:append(" " .. reason)
    elseif op == 0x81 then
        if not need(16) then return len end
        root:add(mrc, buf(o, 16), "CNP"):add(f.echo_ev, buf(o, 4))
    elseif op == 0xE2 then
        if not need(8) then return len end
        root:add(mrc, buf(o, 8), "EV probe"):add(f.probe_seq, buf(o, 4))
    elseif op == 0xE3 then
        if not need(12) then return len end
        local r = root:add(mrc, buf(o, 12), "EV probe reply")
        r:add(f.probe_seq, buf(o, 4))
        r:add(f.echo_ev, buf(o + 4, 4))
        r:add(f.echo_ts, buf(o + 8, 4))
    elseif op == 0xE4 then
        if not need(12) then return len end
        local r = root:add(mrc, buf(o, 12), "Port Status Update")
        r:add(f.psu_seq, buf(o, 4))
        r:add(f.psu_up, buf(o + 4, 4))
        r:add(f.psu_planes, buf(o + 8, 1))
        r:add(f.psu_ack, buf(o + 9, 1))
        if buf(o + 9, 1):uint() >= 0x80 then
            pinfo.cols.info:append(" ack " .. buf(o, 4):uint())
        else
            pinfo.cols.info:append(string.format(" up 0x%x of %d", buf(o + 4, 4):uint(), buf(o + 8, 1):uint()))
        end
    end
    return len
end

local registered_port = nil
local function register_port()
    local t = DissectorTable.get("udp.port")
    if registered_port then t:remove(registered_port, mrc) end
    registered_port = mrc.prefs.port
    t:add(registered_port, mrc)
end
mrc.prefs_changed = register_port
register_port()
