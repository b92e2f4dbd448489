//! The `KEY = VALUE` statements of a `virtual` block: the `=`, then the value of each kind of
//! setting (an address, the scheduler's name, a server and its weight, a process knob).

use super::{Parsed, Parser};
use crate::import_ktcpvs::lex::{c_number, Token};
use crate::import_ktcpvs::model::{KServer, KService, Knob, Setting};

impl Parser<'_> {
    /// The statement of the setting `key`, `t` its first word (read); a later statement of the
    /// same key replaces the earlier, as in KTCPVS.
    pub(super) fn statement(
        &mut self,
        key: &'static str,
        t: &Token,
        service: &mut KService,
    ) -> Parsed<()> {
        let eq = self.equals(key, t)?;
        match key {
            "listen" | "redirect" => self.address_setting(key, &eq, service),
            "scheduler" => {
                let v = self.value(&eq, "`scheduler =` needs a name such as `http`")?;
                if let Some(old) = service.scheduler.replace(Setting {
                    value: v.text.clone(),
                    at: v.pos(),
                }) {
                    service.overridden.push(old.at);
                }
                Ok(())
            }
            "server" => self.server(t, &eq, service),
            "rule" => {
                let rule = self.rule(t, &eq)?;
                service.rules.push(rule);
                Ok(())
            }
            knob => self.knob(knob, t, &eq, service),
        }
    }

    /// The `=` after the setting's name: tcpvsadm needs it as a word of its own.
    fn equals(&mut self, key: &str, t: &Token) -> Parsed<Token> {
        let eq = self.value(t, &format!("`{key}` needs ` = ` and a value"))?;
        if eq.text == "=" {
            return Ok(eq);
        }
        let message = if eq.text.starts_with('=') {
            format!(
                "put a space after `=`: tcpvsadm reads `{}` as one word",
                eq.text
            )
        } else {
            format!("expected `=` after `{key}`, found `{}`", eq.text)
        };
        self.d.error(eq.pos(), message);
        Err(())
    }

    /// `listen = ADDR` or `redirect = ADDR`.
    fn address_setting(&mut self, key: &str, eq: &Token, service: &mut KService) -> Parsed<()> {
        let v = self.value(eq, &format!("`{key} =` needs an address, HOST:PORT"))?;
        let addr = self.addr(&v)?;
        let slot = if key == "listen" {
            &mut service.listen
        } else {
            &mut service.redirect
        };
        if let Some(old) = slot.replace(Setting {
            value: addr,
            at: v.pos(),
        }) {
            service.overridden.push(old.at);
        }
        Ok(())
    }

    /// `server = ADDR WEIGHT`. A server whose line has an error is noted as broken, so that
    /// the rules naming it are not refused for it too.
    fn server(&mut self, t: &Token, eq: &Token, service: &mut KService) -> Parsed<()> {
        let v = self.value(eq, "`server =` needs an address and a weight")?;
        let addr = self.addr(&v)?;
        let Ok(w) = self.value(
            &v,
            "`server = ADDRESS WEIGHT` needs the weight, 1..65535 (tcpvsadm -f has no default)",
        ) else {
            service.broken.push(addr.key());
            return Err(());
        };
        let Some(weight) = c_number(&w.text, 1, 65535) else {
            service.broken.push(addr.key());
            self.d.error(
                w.pos(),
                format!(
                    "weight `{}` is not a number 1..65535 (tcpvsadm -f refuses it)",
                    w.text
                ),
            );
            return Err(());
        };
        service.servers.push(KServer {
            addr,
            at: v.pos(),
            weight: weight as u32,
            line: t.line,
        });
        Ok(())
    }

    /// `startservers`, `maxclients`, `minspareservers`, `maxspareservers`: a number 1..65535.
    fn knob(
        &mut self,
        knob: &'static str,
        t: &Token,
        eq: &Token,
        service: &mut KService,
    ) -> Parsed<()> {
        let v = self.value(eq, &format!("`{knob} =` needs a number 1..65535"))?;
        let Some(n) = c_number(&v.text, 1, 65535) else {
            self.d.error(
                v.pos(),
                format!("{knob} `{}` is not a number 1..65535", v.text),
            );
            return Err(());
        };
        if let Some(old) = service.knobs.iter().position(|k| k.key == knob) {
            let old = service.knobs.remove(old);
            service.overridden.push(old.at);
        }
        service.knobs.push(Knob {
            key: knob,
            value: n as u32,
            line: t.line,
            at: t.pos(),
        });
        Ok(())
    }
}
