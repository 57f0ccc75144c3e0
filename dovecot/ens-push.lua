-- ENS's push script for Dovecot 2.3's push_notification Lua driver (docs/dovecot.md).
--
-- On every delivery into an Inbox whose account opted in (a routing token ENS wrote
-- into the account's server-level METADATA at ens_push_key), it POSTs the message's
-- UID, sender and subject to ens_push_url with ens_push_auth. When ENS answers 410
-- (the opt-in outlived its registration: the device left, or was reaped), it clears
-- the opt-in itself, so ENS keeps no password to do it with. Any other failure is
-- logged; the mail is delivered regardless.
--
-- Installed as /usr/share/ens/dovecot/ens-push.lua; `ens-cron dovecot config` prints
-- the plugin settings that name it.

local client

local function quoted(text)
  text = tostring(text or "")
  text = text:gsub('[%c"\\]', function(c)
    if c == '"' then return '\\"' end
    if c == '\\' then return '\\\\' end
    return string.format('\\u%04x', string.byte(c))
  end)
  return '"' .. text .. '"'
end

function script_init()
  client = dovecot.http.client({
    request_timeout_msecs = 2000,
    max_attempts = 2,
    user_agent = "dovecot-ens-push/1",
  })
  return 0
end

function dovecot_lua_notify_begin_txn(user)
  local key = user:plugin_getenv("ens_push_key")
  local token
  if key and key ~= "" then token = user:metadata_get(key) end
  return {
    user = user, key = key, token = token, messages = {},
    url = user:plugin_getenv("ens_push_url"), auth = user:plugin_getenv("ens_push_auth"),
  }
end

function dovecot_lua_notify_event_message_new(ctx, event)
  if ctx.token and ctx.token ~= "" and event.mailbox == "INBOX" then
    table.insert(ctx.messages, event)
  end
end

function dovecot_lua_notify_end_txn(ctx, success)
  if not success then return end
  for _, event in ipairs(ctx.messages) do
    local body = '{"user":' .. quoted(ctx.token) .. ',"username":' .. quoted(ctx.user.username) ..
      ',"event":"messageNew","folder":"INBOX","imap-uidvalidity":' .. string.format("%d", event.uid_validity) ..
      ',"imap-uid":' .. string.format("%d", event.uid) .. ',"from":' .. quoted(event.from) ..
      ',"subject":' .. quoted(event.subject) .. '}'
    local request = client:request({ url = ctx.url, method = "POST" })
    request:add_header("Authorization", ctx.auth)
    request:add_header("Content-Type", "application/json; charset=utf-8")
    request:set_payload(body)
    local response = request:submit()
    local status = response:status()
    if status == 410 then
      ctx.user:metadata_unset(ctx.key)
      dovecot.i_info("ens-push: ENS no longer serves this account's opt-in; cleared it")
      return
    elseif status < 200 or status > 299 then
      dovecot.i_error("ens-push: " .. status .. " " .. tostring(response:reason()))
    end
  end
end
