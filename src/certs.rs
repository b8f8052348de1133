//! `hivekeeper certs dev`: development certificates, so TLS and mutual TLS can be tried in a
//! minute (the generator is `hivekeeper_tls::dev`). Prints what it wrote and the flags that
//! use it.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use hivekeeper_tls::dev::DevCerts;

/// Flags of `hivekeeper certs`.
#[derive(Debug, Args)]
pub struct CertsArgs {
    #[command(subcommand)]
    command: CertsCommand,
}

#[derive(Debug, Subcommand)]
enum CertsCommand {
    /// Write a development CA (ca.crt, ca.key), a server certificate for the agent endpoint
    /// (server.crt/.key, for localhost, 127.0.0.1 and ::1), client certificates
    /// (client-NAME.crt/.key, CN = NAME) and peer certificates (peer-MEMBER.crt/.key, CN and
    /// SAN = the member's name). Keys are written mode 0600. For trying TLS, not for
    /// production: the CA key sits beside the certificates and nothing expires.
    Dev(DevArgs),
}

/// Flags of `hivekeeper certs dev`.
#[derive(Debug, Args)]
struct DevArgs {
    /// Directory to write into (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Cluster members to make peer certificates for (their --name), comma-separated.
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    members: Vec<String>,
    /// Clients to make certificates for (agent ids, `admin`), comma-separated.
    #[arg(
        long,
        value_name = "NAME,...",
        value_delimiter = ',',
        default_value = "admin"
    )]
    clients: Vec<String>,
    /// Overwrite existing files (without it, nothing is written if any file exists).
    #[arg(long)]
    force: bool,
}

/// Runs `hivekeeper certs`.
pub fn run(args: CertsArgs) -> anyhow::Result<()> {
    let CertsCommand::Dev(args) = args.command;
    let written = DevCerts {
        out: args.out.clone(),
        members: args.members.clone(),
        clients: args.clients.clone(),
        force: args.force,
    }
    .write()
    .context("certs dev")?;
    println!("wrote {} files to {}:", written.len(), args.out.display());
    for file in &written {
        let mode = if file.private { "0600" } else { "0644" };
        println!("  {mode}  {}", file.path.display());
    }
    let dir = args.out.display();
    println!();
    println!("agent endpoint over TLS (mutual TLS with --mqtt-client-ca):");
    println!(
        "  hivekeeper serve --mqtt-tls-cert {dir}/server.crt --mqtt-tls-key {dir}/server.key \
         --mqtt-client-ca {dir}/ca.crt"
    );
    if let Some(client) = args.clients.first() {
        println!("CLI and SDK (client id = the certificate's CN, {client:?}):");
        println!(
            "  hivekeeper status --broker localhost:1883 --tls-ca {dir}/ca.crt --tls-cert \
             {dir}/client-{client}.crt --tls-key {dir}/client-{client}.key"
        );
    } else {
        println!("CLI and SDK:");
        println!("  hivekeeper status --broker localhost:1883 --tls-ca {dir}/ca.crt");
    }
    if let Some(member) = args.members.first() {
        println!("peer port, on each member (here {member}):");
        println!(
            "  --peer-tls-cert {dir}/peer-{member}.crt --peer-tls-key {dir}/peer-{member}.key \
             --peer-ca {dir}/ca.crt"
        );
    }
    Ok(())
}
